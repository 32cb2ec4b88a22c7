// rhea: send typed application properties, ids and a group close to QUEUE, then exit.
// Usage: node typed_producer.js PORT QUEUE
"use strict";
const rhea = require("rhea");

const [port, queue] = process.argv.slice(2);
const messages = [
  {
    message_id: "order-1",
    correlation_id: "corr-1",
    subject: "order",
    reply_to: "replies",
    group_id: "g",
    group_sequence: 1,
    // rhea picks the AMQP type: uint, int, double, boolean, string, timestamp
    application_properties: {
      count: 42, neg: -7, price: 9.75, ok: true, name: "x", when: new Date(1700000000000),
    },
    body: "one",
  },
  { group_id: "g", application_properties: { JMSXGroupSeq: -1 }, body: "close" },
];
const container = rhea.create_container({ id: "rhea-typed" });
const conn = container.connect({ host: "127.0.0.1", port: Number(port), reconnect: false });
const sender = conn.open_sender({ target: queue });
let sent = 0;
let settled = 0;
sender.on("sendable", () => {
  while (sender.sendable() && sent < messages.length) {
    sender.send(messages[sent]);
    sent += 1;
  }
});
sender.on("accepted", () => {
  settled += 1;
  if (settled === messages.length) {
    conn.close();
  }
});
sender.on("rejected", (ctx) => {
  process.stderr.write(String(ctx.delivery.remote_state.error) + "\n");
  process.exit(1);
});
conn.on("connection_error", (ctx) => {
  process.stderr.write(String(ctx.connection.error) + "\n");
  process.exit(1);
});
setTimeout(() => { process.stderr.write("timeout\n"); process.exit(1); }, 30000).unref();
