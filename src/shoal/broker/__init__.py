"""The pure broker core: ``from shoal.broker.core import Broker``.

No asyncio, no I/O, no threads, no clock reads: time is the ``now`` argument
(seconds, float). Commands in, effects (``effects.py``) and records
(``shoal.records``) out. The contract is docs/architecture.md; the
semantics are DESIGN.md's message-group contract G1-G16.

Modules
-------
``core.py``          ``Broker``, the facade: every command, the connections,
                     delivery rounds (``take_effects``), time (``tick``),
                     warnings. It holds the components below as typed
                     attributes and hands each command's work to them.
``addresses.py``     ``AddressBook``: the queues and topics by name; creating,
                     finding and deleting them; the queue a subscription reads.
``memory.py``        ``MemoryBudget``: global-max-size, paging (bodies are
                     requested, never read).
``transactions.py``  ``Transactions``: BEGIN/COMMIT/ABORT.
``cluster_routing.py`` ``ClusterRouter`` (None on a single node): bindings,
                     forward queues, moves, fencing.
``admin.py``         ``Admin``: operator commands; ``views.py`` ``Views``:
                     read-only views (management).
``routing.py``, ``subscriptions.py``, ``settlement.py``  What SEND, SUBSCRIBE and
                     ACK/NACK read of their frames; ``restore.py`` rebuilding
                     queues after ``Store.open()``.
``model.py``         Plain data: Connection, Consumer (credit), Group, Message, Transaction,
                     Topic, CoreLimits, group flags and states.
``queue.py``         One queue: message lifecycle (enqueue, settle, requeue,
                     dead-letter, expire, purge), consumers joining/leaving,
                     exclusive consumer, dispatch delay, rebalance, reset.
``groups.py``        The group table: binding, draining, idle LRU and eviction,
                     parking; group keys (exact / buckets / off).
``dispatch.py``      Which message goes to which consumer next: ready heap,
                     per-consumer waiting heaps, assignment and round-robin.
``selector.py``      SUBSCRIBE selectors: JMS syntax (a Lark grammar) compiled
                     to closures over headers, cached by text.
``destinations.py``  Destination strings and the queue names derived from them.
``logqueue.py``, ``sink.py``  Log queues and the exactly-once sink (Spark).

Where the group rules live
--------------------------
G1  group id / header           ``Queue.accept`` (group-header, _AMQ_GROUP_ID alias)
G2  one holder, order           ``Group.owner``/``holder``; ``Queue.place``
                                and ``dispatch`` never hand a group to a consumer
                                while another holds it; ``Queue.insert_back``
                                returns messages by id (arrival order)
G3  sticky, close, draining     ``Queue.deliver`` sets F_CLOSING on a negative
                                JMSXGroupSeq; ``Queue.drained`` unbinds once the
                                holder settled; ``Queue.reset_group`` (F_RESET)
G4  shared groups               ``Queue.drained`` (unbind at zero in flight)
G5  no head-of-line blocking    ``dispatch.py`` (module docstring)
G6  assignment, dispatch delay  ``ConsumerSet.pick_for_group``; ``Queue.add_consumer`` /
                                ``release_hold``; ``Broker.tick``
G7  group-first-key             F_FIRST set by ``GroupTable.bind``, read by ``Queue.deliver``
G8  rebalance, reset            ``ConsumerSet.rebalance_moves``, ``Queue.move_group``;
                                ``Broker.reset_groups``
G9  buckets, memory             ``Queue.enqueue`` (keys), ``GroupTable.retire``
                                / ``evict`` (idle bindings only)
G10 ungrouped, default-group    ``ConsumerSet.next_round_robin``; ``Queue.default_group``
G11 failure keeps order         ``Queue.requeue`` (+ dead-letter / park)
G13 exclusive consumer          ``ConsumerSet.sole_consumer``, ``Queue.update_active``
G14 topics                      one Queue per subscription, own settings
G15 visibility                  ``Broker.group_page`` / ``group_info`` /
                                ``group_state_counts`` (``group_infos``: every row)
G16 queue order per consumer    ``pull_earlier`` (dispatch.py docstring)
Selectors, priority             dispatch.py docstring (``_dispatch_ready_sel``,
                                ``PRIO_STEP``); ``Queue.ungrouped_by_priority`` / ``GroupTable.singles``

Memory budget and paging
------------------------
``max-size-bytes`` (queue) and ``global-max-size`` (broker) bound the bytes
of message bodies held in memory; past them ``address-full-policy`` applies:
``page`` (default, as Artemis) pages persistent messages of durable queues
out (``Queue.page_out`` from ``Broker.take_records``); the core never reads a
body back: ``Broker.take_page_ins`` lists what needs one, the server reads
them and answers with ``Broker.bodies_read``. ``block`` pauses producers
(``ProducerFlow``), ``fail`` refuses the SEND. Non-persistent messages never
page, and a core built with ``paging=False`` (a store that cannot read bodies
back) treats "page" as "block".

Warnings
--------
``Broker.take_warnings()``: ``(conn_id or None, text)`` for the log, e.g.
destination parameters that differ from an existing queue's settings
(ignored, DESIGN "Destination parameters"); the server logs them at WARNING.

Defaults and conventions (DESIGN "Defaults")
--------------------------------------------
* prefetch 1000 messages (``prefetch-count`` or ``activemq.prefetchSize``;
  0 means unbounded, as RabbitMQ); ``consumer-window-size`` bytes, -1
  unbounded; auto-ack deliveries are settled when delivered and use no
  credit (only writability limits them).
* ack ids are ``str(message.id)``; ids are assigned when a message enters a
  queue (COMMIT time in a transaction), so id order is queue order. Ids of
  persistent messages never repeat; a non-persistent message lost in a
  restart may see its id reused.
* client mode ACK and NACK are cumulative over the subscription;
  client-individual ones settle one message.
* A NACKed or returned message goes back to the head of its group (or of
  the ungrouped FIFO) with ``delivery_count + 1``; once
  ``delivery_count >= max-delivery-attempts`` the poison policy applies
  (dead-letter: a copy with ``original-destination`` goes to
  ``dead-letter-address``, the group goes on; park: the group is parked;
  an ungrouped message is always dead-lettered). A message's own DLQ never
  dead-letters into itself.
* Acks inside a transaction free the consumer's credit at once but keep the
  message (and so its group) held until COMMIT/ABORT; a consumer closed with
  an open transaction keeps its group held until the transaction ends.
* Queue names: ``/queue/N`` -> ``N``; ``/temp-queue/N`` -> ``tmp.<conn>.N``;
  durable topic subscription -> ``T::N`` (``T::<client-id>.N``), private
  topic subscription -> ``T::<conn>/<sub-id>``. Address settings match the
  queue name, for topic subscriptions the topic name.
* Records: ``QueueDeclared`` for queues created at run time that survive a
  restart (auto-created /queue/, dead-letter/expiry queues, durable
  subscriptions, ``create_queue``); ``MessageStored`` for persistent messages
  in durable queues; ``MessageRemoved`` on ack, expiry, dead-letter and
  purge; ``DeliveryCounted`` when a persistent message comes back (or before
  every delivery with ``persist-delivery-count-before-delivery``);
  ``GroupParked``/``GroupResumed``; ``QueueDeleted`` (which drops the queue's
  stored messages).
"""
