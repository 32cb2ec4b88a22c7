// rhea: send one message with every section a broker should pass on (and
// delivery annotations, which are per hop), receive it back, print it as JSON.
// Usage: node kept_sections.js PORT QUEUE
"use strict";
const rhea = require("rhea");

const [port, queue] = process.argv.slice(2);
const container = rhea.create_container({ id: "rhea-kept" });
const conn = container.connect({ host: "127.0.0.1", port: Number(port), reconnect: false });
const sender = conn.open_sender({ target: queue });
let sent = false;
sender.on("sendable", () => {
  if (sent) return;
  sent = true;
  sender.send({
    delivery_annotations: { "x-opt-hop": "first" },
    message_annotations: { "x-opt-jms-msg-type": 3, "x-opt-origin": "rhea" },
    group_id: "g",
    reply_to_group_id: "answers",
    application_properties: { n: 7 },
    body: rhea.message.data_section(Buffer.from("payload")),
    footer: { "x-opt-checksum": "abc" },
  });
});
sender.on("accepted", () => {
  const receiver = conn.open_receiver({ source: queue, autoaccept: true });
  receiver.on("message", (ctx) => {
    const m = ctx.message;
    process.stdout.write(JSON.stringify({
      delivery_annotations: m.delivery_annotations || null,
      message_annotations: m.message_annotations || null,
      group_id: m.group_id,
      reply_to_group_id: m.reply_to_group_id || null,
      application_properties: m.application_properties || null,
      body: Buffer.from(m.body.content || m.body).toString(),
      footer: m.footer || null,
      first_acquirer: m.first_acquirer === true,
      delivery_count: m.delivery_count || 0,
    }) + "\n");
    conn.close();
  });
});
sender.on("rejected", (ctx) => {
  process.stderr.write(JSON.stringify(ctx.delivery.remote_state.error) + "\n");
  process.exit(1);
});
conn.on("connection_error", (ctx) => {
  process.stderr.write(JSON.stringify(ctx.connection.error) + "\n");
  process.exit(1);
});
setTimeout(() => { process.stderr.write("timeout\n"); process.exit(1); }, 30000).unref();
