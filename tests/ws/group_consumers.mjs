// Two @stomp/stompjs consumers on one queue over a real broker's WebSocket port.
//
//   node group_consumers.mjs WS_URL QUEUE EXPECTED
//
// Prints "ready" once both subscriptions are receipted, then, when EXPECTED
// messages have arrived (each acked with client-individual ack) and the
// connections have run on heart-beats for a while, one JSON line:
// {"received": [{consumer, group, seq}], "pongs": [n, n], "pings": [n, n],
//  "errors": [...], "closes": n}
import { Client } from '@stomp/stompjs';
import WebSocket from 'ws';

const [url, queue, expectedText] = process.argv.slice(2);
const expected = Number(expectedText);
const LINGER_MS = 1500; // heart-beats must keep both connections open meanwhile

const received = [];
const pongs = [0, 0];
const pings = [0, 0];
const errors = [];
let closes = 0;
let subscribed = 0;
let finished = false;

function makeClient(index) {
  const client = new Client({
    webSocketFactory: () => new WebSocket(url, ['v12.stomp', 'v11.stomp', 'v10.stomp']),
    reconnectDelay: 0,
    heartbeatIncoming: 200,
    heartbeatOutgoing: 200,
    debug: (line) => {
      if (line === '<<< PONG') pongs[index] += 1;
      if (line === '>>> PING') pings[index] += 1;
    },
  });
  client.onConnect = () => {
    const receipt = `sub-${index}`;
    client.watchForReceipt(receipt, () => {
      subscribed += 1;
      if (subscribed === 2) console.log('ready');
    });
    client.subscribe(
      `/queue/${queue}`,
      (message) => {
        received.push({
          consumer: index,
          group: message.headers.JMSXGroupID,
          seq: Number(message.body),
        });
        message.ack();
        if (received.length === expected) setTimeout(finish, LINGER_MS);
      },
      { ack: 'client-individual', receipt, 'activemq.prefetchSize': '5' },
    );
  };
  client.onStompError = (frame) => errors.push(`consumer ${index}: ${frame.headers.message}`);
  client.onWebSocketClose = () => {
    if (!finished) closes += 1;
  };
  client.activate();
  return client;
}

const clients = [makeClient(0), makeClient(1)];

async function finish() {
  finished = true;
  await Promise.all(clients.map((c) => c.deactivate()));
  console.log(JSON.stringify({ received, pongs, pings, errors, closes }));
  process.exit(0);
}
