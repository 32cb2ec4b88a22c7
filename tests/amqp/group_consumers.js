// rhea: two consumer links and one producer on one queue through Shoal.
// Usage: node group_consumers.js PORT QUEUE SEND_GROUPS PER_GROUP EXPECTED
// Prints "ready" once both receivers are attached, then one JSON report line.
"use strict";
const rhea = require("rhea");

const [port, queue, groups, perGroup, expected] = process.argv.slice(2);
const total = Number(expected);
const received = [];
const errors = [];
let attached = 0;

const container = rhea.create_container({ id: "rhea-test" });
const conn = container.connect({ host: "127.0.0.1", port: Number(port), reconnect: false });

for (const consumer of [0, 1]) {
  const receiver = conn.open_receiver({ source: queue, credit_window: 5, autoaccept: false });
  receiver.on("receiver_open", () => {
    attached += 1;
    if (attached === 2) {
      process.stdout.write("ready\n");
      sendAll();
    }
  });
  receiver.on("message", (ctx) => {
    const m = ctx.message;
    received.push([consumer, m.group_id, Number(m.group_sequence || 0),
                   m.application_properties ? m.application_properties.via : null]);
    ctx.delivery.accept();
    if (received.length === total) {
      process.stdout.write(JSON.stringify({ received, errors }) + "\n");
      conn.close();
    }
  });
}

function sendAll() {
  const sender = conn.open_sender({ target: queue });
  let next = 0;
  const count = Number(groups) * Number(perGroup);
  const pump = () => {
    while (sender.sendable() && next < count) {
      const g = next % Number(groups);
      const seq = Math.floor(next / Number(groups)) + 1;
      sender.send({ body: `r${g}-${seq}`, group_id: `r${g}`, group_sequence: seq, durable: true,
                    application_properties: { via: "rhea" } });
      next += 1;
    }
  };
  sender.on("sendable", pump);
  sender.on("rejected", (ctx) => errors.push(String(ctx.delivery.remote_state.error)));
}

conn.on("connection_error", (ctx) => errors.push(String(ctx.connection.error)));
conn.on("disconnected", (ctx) => {
  if (received.length < total) {
    process.stdout.write(JSON.stringify({ received, errors: errors.concat(["disconnected"]) }) + "\n");
    process.exit(1);
  }
});
setTimeout(() => {
  process.stdout.write(JSON.stringify({ received, errors: errors.concat(["timeout"]) }) + "\n");
  process.exit(1);
}, 60000).unref();
