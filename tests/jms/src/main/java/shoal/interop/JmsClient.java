package shoal.interop;

import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.Destination;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.qpid.jms.JmsConnectionFactory;

/**
 * A Qpid JMS client for the interop tests (tests/jms/test_jms.py). Each command does one
 * JMS flow against a broker and prints what it received as JSON lines, one per message:
 * the Python side holds the assertions.
 *
 * <pre>
 * send URL QUEUE --groups G --per-group N [--close-groups] [--priority P] [--ttl MS] [--prop k=v] [--text T]
 *               [--transacted [--rollback]]   (one transaction, committed or rolled back at the end)
 * receive URL QUEUE [--consumers C] [--selector S] [--ack auto|client|individual|transacted]
 *                   [--max N] [--idle MS] [--wait-first MS] [--recover-after N] [--ack-only SEQ]
 *                   [--rollback-after N]
 * durable URL TOPIC --client-id ID --name SUB (subscribe | publish N | receive) [--idle MS]
 * </pre>
 */
public final class JmsClient {
    private static final int INDIVIDUAL_ACKNOWLEDGE = 101; // Qpid JMS's own ack mode

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new LinkedHashMap<>();
        List<String> words = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].startsWith("--")) {
                String key = args[i].substring(2);
                boolean flag = i + 1 >= args.length || args[i + 1].startsWith("--");
                opts.put(key, flag ? "true" : args[++i]);
            } else {
                words.add(args[i]);
            }
        }
        String command = words.get(0);
        JmsConnectionFactory factory = new JmsConnectionFactory(words.get(1));
        switch (command) {
            case "send" -> send(factory, words.get(2), opts);
            case "receive" -> receive(factory, words.get(2), opts);
            case "durable" -> durable(factory, words.get(2), words.get(3), opts);
            default -> throw new IllegalArgumentException("unknown command " + command);
        }
    }

    private static void send(JmsConnectionFactory factory, String queue, Map<String, String> opts)
            throws Exception {
        int groups = Integer.parseInt(opts.getOrDefault("groups", "1"));
        int perGroup = Integer.parseInt(opts.getOrDefault("per-group", "1"));
        boolean transacted = opts.containsKey("transacted");
        try (Connection connection = factory.createConnection()) {
            Session session = transacted
                    ? connection.createSession(true, Session.SESSION_TRANSACTED)
                    : connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = session.createProducer(session.createQueue(queue));
            producer.setDeliveryMode(DeliveryMode.PERSISTENT);
            if (opts.containsKey("priority")) {
                producer.setPriority(Integer.parseInt(opts.get("priority")));
            }
            if (opts.containsKey("ttl")) {
                producer.setTimeToLive(Long.parseLong(opts.get("ttl")));
            }
            for (int seq = 1; seq <= perGroup; seq++) {
                for (int g = 0; g < groups; g++) {
                    TextMessage message = session.createTextMessage(opts.getOrDefault("text", "m"));
                    if (!opts.containsKey("no-group")) {
                        message.setStringProperty("JMSXGroupID", "g" + g);
                        boolean closing = opts.containsKey("close-groups") && seq == perGroup;
                        message.setIntProperty("JMSXGroupSeq", closing ? -1 : seq);
                    }
                    message.setIntProperty("seq", seq);
                    if (opts.containsKey("prop")) {
                        String[] kv = opts.get("prop").split("=", 2);
                        message.setStringProperty(kv[0], kv[1]);
                    }
                    producer.send(message);
                }
            }
            if (transacted && opts.containsKey("rollback")) {
                session.rollback();
            } else if (transacted) {
                session.commit();
            }
        }
    }

    private static void receive(JmsConnectionFactory factory, String queue, Map<String, String> opts)
            throws Exception {
        int consumers = Integer.parseInt(opts.getOrDefault("consumers", "1"));
        int max = Integer.parseInt(opts.getOrDefault("max", "1000000"));
        long idle = Long.parseLong(opts.getOrDefault("idle", "1500"));
        String ack = opts.getOrDefault("ack", "auto");
        int recoverAfter = Integer.parseInt(opts.getOrDefault("recover-after", "0"));
        int rollbackAfter = Integer.parseInt(opts.getOrDefault("rollback-after", "0"));
        int mode = switch (ack) {
            case "auto" -> Session.AUTO_ACKNOWLEDGE;
            case "client" -> Session.CLIENT_ACKNOWLEDGE;
            case "individual" -> INDIVIDUAL_ACKNOWLEDGE;
            case "transacted" -> Session.SESSION_TRANSACTED;
            default -> throw new IllegalArgumentException("ack " + ack);
        };
        List<Connection> connections = new ArrayList<>();
        List<Session> sessions = new ArrayList<>();
        List<MessageConsumer> readers = new ArrayList<>();
        try {
            for (int c = 0; c < consumers; c++) {
                Connection connection = factory.createConnection();
                connections.add(connection);
                Session session = connection.createSession(mode == Session.SESSION_TRANSACTED, mode);
                sessions.add(session);
                Destination destination = session.createQueue(queue);
                readers.add(opts.containsKey("selector")
                        ? session.createConsumer(destination, opts.get("selector"))
                        : session.createConsumer(destination));
                connection.start();
            }
            System.out.println("{\"ready\":true}");
            System.out.flush();
            int received = 0;
            int recovered = 0;
            int rolledBack = 0;
            long lastMessage = System.currentTimeMillis();
            List<List<Message>> unacked = new ArrayList<>();
            for (int c = 0; c < consumers; c++) {
                unacked.add(new ArrayList<>());
            }
            // A receiver started before its sender waits up to --wait-first for the first message.
            long waitFirst = Long.parseLong(opts.getOrDefault("wait-first", String.valueOf(idle)));
            while (received < max
                    && System.currentTimeMillis() - lastMessage < (received == 0 ? waitFirst : idle)) {
                boolean any = false;
                for (int c = 0; c < consumers && received < max; c++) {
                    Message message = readers.get(c).receive(20);
                    if (message == null) {
                        continue;
                    }
                    any = true;
                    received++;
                    print(c, message);
                    unacked.get(c).add(message);
                    Session session = sessions.get(c);
                    if (recoverAfter > 0 && recovered == 0 && unacked.get(c).size() == recoverAfter) {
                        recovered++;
                        unacked.get(c).clear();
                        session.recover();
                        System.out.println("{\"recovered\":" + c + "}");
                    } else if (rollbackAfter > 0 && rolledBack == 0
                            && unacked.get(c).size() == rollbackAfter) {
                        rolledBack++;
                        unacked.get(c).clear();
                        session.rollback();
                        System.out.println("{\"rolled_back\":" + c + "}");
                    } else if (opts.containsKey("ack-only")) {
                        if (message.getIntProperty("seq") == Integer.parseInt(opts.get("ack-only"))) {
                            message.acknowledge();
                        }
                    } else if (recoverAfter > 0 && recovered == 0) {
                        continue; // nothing acknowledged before the recover
                    } else if (rollbackAfter > 0 && rolledBack == 0) {
                        continue; // nothing committed before the rollback
                    } else if (mode == Session.CLIENT_ACKNOWLEDGE || mode == INDIVIDUAL_ACKNOWLEDGE) {
                        message.acknowledge();
                    } else if (mode == Session.SESSION_TRANSACTED) {
                        session.commit();
                        unacked.get(c).clear();
                    }
                }
                if (any) {
                    lastMessage = System.currentTimeMillis();
                }
            }
        } finally {
            for (Connection connection : connections) {
                connection.close();
            }
        }
    }

    private static void durable(JmsConnectionFactory factory, String topicName, String action,
            Map<String, String> opts) throws Exception {
        try (Connection connection = factory.createConnection()) {
            connection.setClientID(opts.get("client-id"));
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic topic = session.createTopic(topicName);
            switch (action) {
                case "subscribe" -> session.createDurableSubscriber(topic, opts.get("name")).close();
                case "publish" -> {
                    MessageProducer producer = session.createProducer(topic);
                    for (int seq = 1; seq <= Integer.parseInt(opts.get("count")); seq++) {
                        Message message = session.createTextMessage("t");
                        message.setIntProperty("seq", seq);
                        producer.send(message);
                    }
                }
                case "receive" -> {
                    MessageConsumer consumer = session.createDurableSubscriber(topic, opts.get("name"));
                    connection.start();
                    long idle = Long.parseLong(opts.getOrDefault("idle", "1500"));
                    Message message;
                    while ((message = consumer.receive(idle)) != null) {
                        print(0, message);
                    }
                    consumer.close();
                    if (opts.containsKey("unsubscribe")) {
                        session.unsubscribe(opts.get("name"));
                    }
                }
                default -> throw new IllegalArgumentException("durable " + action);
            }
        }
    }

    /** One received message as a JSON line: consumer, group, sequences, flags, priority. */
    private static void print(int consumer, Message message) throws Exception {
        String group = message.getStringProperty("JMSXGroupID");
        Object first = message.getObjectProperty("JMSXGroupFirstForConsumer");
        String text = message instanceof TextMessage t ? t.getText() : null;
        StringBuilder line = new StringBuilder("{");
        line.append("\"consumer\":").append(consumer);
        line.append(",\"group\":").append(group == null ? "null" : quote(group));
        line.append(",\"seq\":").append(message.getIntProperty("seq"));
        line.append(",\"redelivered\":").append(message.getJMSRedelivered());
        line.append(",\"priority\":").append(message.getJMSPriority());
        line.append(",\"first\":").append(first == null ? "null" : quote(first.toString()));
        line.append(",\"color\":").append(quote(String.valueOf(message.getStringProperty("color"))));
        line.append(",\"text\":").append(text == null ? "null" : quote(text));
        line.append("}");
        System.out.println(line);
        System.out.flush();
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
