"""What docs/benchmarks.md says of each recorded run, by its file or run id.

The figures themselves come from the files in bench/recorded/; these are the words
around them: what changed between the builds, what the machine did that hour, what
a reader should not conclude. bench/report.py places each note beside its run.
"""

# What a reader needs to know about a recorded Spark run that its numbers do not say.
SPARK_NOTES = {
    "spark-20261125.json": (
        'How to read it: "other cores" is what other processes on the machine used during the '
        "step; the two source steps ran beside 0.9–1.3 busy foreign cores (another engineer's "
        "work), so their figures understate the connector, and the latency run beside 0.7. "
        "The cluster has no more CPU than local mode here (two one-core workers on the same "
        "two cores as `local[2]`), so it measures what the cluster costs, not what it scales "
        "to: the matching job is 40–50 % slower cold on the cluster (14.8 s against 10.6 s "
        "from the broker, 14.5 s against 9.8 s from Parquet: a shuffle between executor JVMs, "
        "tasks launched through the master), the warm runs are within 15 %, and the source "
        "alone was faster on the cluster (6.7 s against 8.4 s), but the local source step ran "
        "beside 1.26 foreign cores, so that comparison is not clean."
    ),
}


BUILD_NOTES = {
    "builds-20261128T155512Z.json": "W6, three reps, c665ff4 (the build of the 2026-11-25 "
    "matrix, pure Python) against cbb5184 (compiled): 1p 1.35x msg/s at 0.81x the CPU per "
    "message, 8p 1.05x at 0.91x, 32p 1.06x at 0.81x, 8p-nodisk 1.00x at 0.96x. The "
    "matrix's lower W6 1p and 8p figures than 2026-11-25's are the machine's.",
    "builds-20261128T155259Z.json": "W7 again, seven reps, c665ff4 (the build of the "
    "2026-11-25 matrix, pure Python) against cbb5184 (compiled): loaded 0.93x the CPU per "
    "message, unloaded 0.93x. The three-rep run before it "
    "(`builds-20261128T154728Z.json`) read loaded 1.13x on reps of 102-135 us: noise at a "
    "fixed 1,000 msg/s, where CPU per message is mostly wake-ups.",
    "builds-20261128T154728Z.json": "W5 and W7 at their fixed rates, c665ff4 (the build "
    "of the 2026-11-25 matrix, pure Python) against cbb5184 (compiled), three reps: W5 "
    "61.0 against 65.8 us per message (0.93x), W7 unloaded 0.93x, loaded 1.13x (see the "
    "seven-rep run above). Both builds measured far more per message than the 2026-11-25 "
    "matrix (36 us on W5): the machine's wake-ups, not the code.",
    "builds-20261128T132103Z.json": "Head 12ce278 against ecb2434, both compiled: "
    "io_uring's ring code (`server/uring.py`) and the flush's fan-out (`server/fanout.py`) "
    "compiled, the message records and `Deliver` with their own `__init__`, typed field "
    "reads in the journal's encoder. Head ahead on every row, in throughput and CPU: W6 "
    "32p 1.15x msg/s at 0.92x the CPU per message (per rep 63.0/65.5, 60.0/68.0, "
    "54.5/75.0, 61.5/63.0 and 60.5/54.0 us head/base: head lower in four of five), 8p "
    "1.07x at 0.89x, 1p 1.02x at 0.93x, 8p-nodisk 1.06x at 0.95x, W1 1.09x at 0.92x. "
    "The instruction counts (`instructions-20261128T125921Z.json`): W6 32p 0.83x, 1p "
    "0.84x, 8p 0.88x, 8p-nodisk 0.92x, W1 0.85x.",
    "builds-20261128T094653Z.json": "Head c93313f, the first draft of fd97f7d (the same "
    "compiled modules; fd97f7d adds the cluster link's heart-beat fix and the tests), "
    "against 89dda62: the STOMP session, its output and read pacing and the journal's sync "
    "pipeline compiled with mypyc. W6 1p 1.05x msg/s at 0.93x the CPU per message, 8p "
    "1.04x at 0.94x, 8p-nodisk 1.01x at 1.01x, and 32p 0.85x at 1.09x: per rep the 32p "
    "CPU pairs were 92.5/86.5, 86/95, 72/91.5, 70.5/64.5 and 79/64.5 us, each build "
    "fastest in some reps, so this machine's noise at 32p is larger than the change. "
    "Its instruction counts (`instructions-20261128T102134Z.json`, fd97f7d against "
    "89dda62) are the steadier figure: W6 32p 0.893x, 1p 0.869x, 8p 0.949x, 8p-nodisk "
    "0.903x, W1 0.968x.",
    "builds-20261128T083114Z.json": "The auto-ack change alone, both builds from their "
    "commits (040a604 against f360f40), W1, nine reps right after the two runs above: "
    "1.04x msg/s at 1.00x the CPU per message, head ahead in six of nine. With the run "
    "above it (the AMQP change alone, 0.98x at 0.96x CPU) neither change costs W1 "
    "anything this machine can show; the 0.90x of `builds-20261128T082518Z` was its noise.",
    "builds-20261128T082518Z.json": 'Head "f360f40+changes" is the next commit: AMQP '
    "pre-settled acks route their removal the auto-ack way (`ack(..., "
    "settled_on_send=True)`, one more argument on the ack path every client-individual "
    "ACK takes). W1 against 040a604, nine reps: 0.90x msg/s at 1.10x the CPU per message, "
    "head behind in eight of nine, with both builds between 56k and 99k msg/s (this "
    "machine at its noisiest of the day). The two runs after it split the difference.",
    "builds-20261128T082737Z.json": "The same head against f360f40 (only the AMQP change "
    "between them), W1, nine reps right after the run above: 0.98x msg/s at 0.96x the CPU "
    "per message, head ahead in four of nine, both builds between 57k and 106k. Read "
    "with the two W1 runs above: no change this size can be told from this hour's noise.",
    "builds-20261128T075251Z.json": "Head f360f40 against 040a604: auto-ack removals are "
    "journaled only after their MESSAGE is written (`Broker.take_sent_removals`, "
    "`BrokerServer.removals_written`), which adds a check per flush and per delivery to "
    "the path every workload takes. W1 0.99x msg/s at 1.01x the CPU per message; head "
    "ahead in one of five reps, 1-4% behind in the others, within this run's spread "
    "(98k-116k msg/s).",
    "builds-20261128T075736Z.json": "The same two builds on W6 (no W6 consumer uses "
    "ack:auto, so nothing W6 does changed): 1p 1.07x msg/s, 8p 1.03x, 32p 1.13x at 0.84x "
    "the CPU per message (head ahead in four of five reps), 8p-nodisk 1.06x. Read as no "
    "worse, not as a gain: the code W6 runs is the same but for two attribute checks, and "
    "this machine's speed moves by more than this within minutes.",
    "builds-20261128T045712Z.json": "Head 1d3dc46 with the receipts of a round more than "
    "`MAX_RIDERS` connections wait on sent in one io_uring enter once the round is durable "
    '(`SyncPipeline._send_after_round`, `DsyncRing.send_now`; docs/journal.md, "Writing"), '
    "instead of one transport write each. 32p 1.12x msg/s at 0.87x the CPU per message (head "
    "ahead in four of five reps, and cheaper in four), 8p 1.03x, 1p 1.00x (one producer: its "
    "receipt rides on the write, untouched), 8p-nodisk 0.95x (journals nothing, untouched: "
    "this run's noise). An ad hoc py-spy of 32p before it (not recorded) had the loop's "
    "receipt writes as its largest item.",
    "builds-20261128T043705Z.json": "Two small cuts to a round's submit, head f2eddf6 with "
    "them (kept, committed after this run): the journal write goes straight to the kernel's "
    "worker (`IOSQE_ASYNC`: a durable write waits anyway, and io_uring's try inline first "
    "only costs the loop time), and an entry's buffer "
    "address is read from the bytes object's address instead of built through three ctypes "
    "objects (`_address`, checked against ctypes at import and in tests). Seven reps: 1p "
    "1.01x msg/s, 8p 1.01x, 32p 1.00x, 8p-nodisk 1.00x: a few microseconds of a ~300 us "
    "round trip, below what this machine can tell apart.",
    "builds-20261128T042851Z.json": "An experiment, not kept: head f2eddf6 with the journal "
    "writer, its frame encoding, its index (`store/journal/writer.py`, `record.py`, "
    "`store/state.py`) and the sync pipeline (`server/persistence.py`) compiled with mypyc "
    "too, both builds compiled. 1p 0.97x msg/s, 8p 0.99x, 32p 1.00x at 0.98x the CPU per "
    "message, 8p-nodisk 0.99x: the journal's Python is not what W6 waits on. (mypyc names "
    "an attribute `_thread` in C `__thread`, a GCC keyword: the build needed the sync "
    "pipeline's thread renamed.)",
    "builds-20261128T015631Z.json": "Before and after this session's W6 work: base a6758d3 "
    "(the previous session's last commit, compiled with `--compile`), head 4c80cc3 (receipts "
    "ride on the journal write when at most two connections wait on a round, and the review "
    "fixes). 1p 0.97x msg/s (head ahead in three of five reps) at 1.13x the CPU per "
    "message, 8p 1.07x (four of five), 32p 0.98x, 8p-nodisk 0.96x at 1.09x CPU, a phase "
    "this change does not touch (no receipt there waits for the journal): the run's noise "
    "is about that size. Base's first 32p rep, 4,708 msg/s, stands alone; its other four "
    "measured 3,538-3,832. Read with the two runs below: the rides move W6 by a few "
    "percent at most, in either direction, on this machine.",
    "builds-20261128T010806Z.json": "Both builds ad0e639, the first version of producers' "
    'receipts riding on the journal write (docs/journal.md, "Writing"): the base ran with '
    "`SHOAL_RING_RECEIPTS=0`, so the loop wrote every receipt as before. Every round carried "
    "the receipts waiting on it as sends linked behind its write. 1p 1.02x msg/s, 8p 0.99x, "
    "32p 0.94x (head slower in four of five reps), 8p-nodisk 1.01x (nothing journaled there). "
    "So e23caef lets a round carry receipts only when at most two connections wait on it "
    "(the next run).",
    "builds-20261128T011534Z.json": "Both builds e23caef: receipts ride only on rounds at "
    "most two connections wait on (`MAX_RIDERS`); the base ran with `SHOAL_RING_RECEIPTS=0`. "
    "Seven reps of 6,000 messages a phase. 1p 1.06x msg/s (head ahead in five of seven "
    "reps), 8p 1.17x, 32p 1.02x, 8p-nodisk 1.00x (the same code path: nothing journaled).",
    "builds-20261127T200855Z.json": "The opposite experiment, not kept either. Both rows "
    "name a6359f8: the head was its working tree with the STOMP session queueing the "
    "flush before handling a read's frames, so a receipt's sync always started after "
    "the flush's writes. W6 1p 1.00x msg/s, 8p 0.96x, 32p 1.08x, 8p-nodisk 0.98x: no "
    "change this machine can tell from noise, so the order stays as it was.",
    "builds-20261127T195842Z.json": "An experiment, not kept. Both rows name 3826370: "
    "the head was that commit's working tree with one change, uncommitted: the server's "
    "flush started the sync a receipt waited for before writing its deliveries "
    "(`SyncPipeline.start_due`), because an ACK read before a SEND in the same loop "
    "iteration queued the flush first and the disk started only after the flush's "
    "writes (seen in an strace of W6 1p). It measured slower on every persistent "
    "phase (1p 0.67x msg/s, 8p 0.81x, 32p 0.92x; 8p-nodisk 0.99x), head lower in all "
    "five reps of 1p whichever build ran first, so it was reverted. Why starting the "
    "disk earlier costs throughput here is not understood yet.",
    "builds-20261127T031924Z.json": "Head 34c83d4: the journal's record codec "
    "(`store/journal/codec.py`) compiled with mypyc as well, its encoder building a "
    "message's text block with a plain loop and encoding acks inline, the writer's index "
    "applying acks without `apply()`, the flush scanning records for `DeliveryCounted` "
    "with `map`; the same bytes on disk. `--compile`: the base tree is compiled too "
    "(without it a checked-out revision runs pure Python, as the 2026-11-25 rows did). "
    "The machine was shared with another engineer's `make test` (the whole suite; "
    "`uptime` read a load average of 3.7 during the run, not recorded in the file).",
    "builds-20261127T033805Z.json": "Head 3323a19: as 34c83d4, and the index computes a "
    "body's location with one addition. The same shared machine, busier (the suite's "
    "ActiveMQ side-by-side and Spark tests; `uptime` read 1.4 shortly before the run "
    "and 7.7 during it, not recorded in the file).",
    "builds-20261127T035459Z.json": "Head 0b42b46: as 3323a19, and the encoder reads "
    "the records' fields untyped, so compiled code hands pack() the int objects it read. "
    "The machine still shared (the suite's Spark tests; `uptime` read 2.4 at the start "
    "and 4.5 at the end, not recorded in the file).",
    "builds-20261127T040452Z.json": "Head 9990c81, the code of 0b42b46, with nothing "
    "else running (`uptime` read 0.5 just before the run).",
    "builds-20261127T040958Z.json": "Both builds main (688cf12): what the position alone "
    "gives, with nothing else running. W2 came out at 0.89x the CPU per message for the "
    "same code. So the four runs above (W2 0.86x, 0.91x, 0.94x, 0.95x; W1, which no "
    "journal change can reach, 0.74-1.00x) do not resolve a change of this size: the "
    "encoder's own saving is measured in process below. Every figure of these five runs "
    "is two to four times the 2026-11-25 ones, also with nothing else running (no steal "
    "time in /proc/stat): this machine was slower that day; compare within a run only. "
    "No message missing and no order violation in any of them.",
    "builds-20261127T063334Z.json": "Head eb57e72: plain ACK frames read as a run by "
    "`StompConnection.take_acks` (one match for the run, no event per frame). Nothing else "
    "running, but the machine's speed drifted within the run (base W1 25.6-40.4 us per "
    "message over its five reps): the instruction counts below are the steadier figure.",
}


RERUN_NOTES = {
    "20261128T144333Z-single": "W6, five reps, with the null sink, the first run with "
    "`--interleave`: the three brokers were started together and took turns rep by rep "
    "(Shoal, ActiveMQ, null sink, then the other way round), so the hour's speed fell on "
    "all three alike. The runs below measured one broker's five reps after another's, "
    "and their 32p ratio moved between 1.73x and 2.07x with the hour. Build 656ed6d: the "
    "broker of 3718afe, only bench/run.py changed. Medians: 1p 3,454 against 2,818 msg/s "
    "(1.23x; rep by rep 1.20-1.55x), 32p 10,208 against 4,993 (2.04x; rep by rep "
    "1.97-2.16x), 8p 9,211 against 6,061 (1.52x). At 32p Shoal's broker used 69 us of CPU "
    "per message (62-72) and its client 132 (128-142); ActiveMQ 219 and 181; the null "
    "sink 38 and 132, at 12,625 msg/s. Both cores were full, so msg/s follows broker plus "
    "client CPU: 201 against 400 us. The margin over 2x is thin: two of the five rep "
    "pairs measured 1.97x and 2.00x.",
    "20261128T130201Z-single": "W6, five reps, with the null sink, on build 12ce278: "
    "io_uring's ring code and the flush's fan-out of deliveries compiled, the message "
    "records and `Deliver` built without a dataclass's interpreted `__init__`. Its broker "
    "executes 0.83x the instructions per message of ecb2434 at 32p and 0.84x at 1p "
    "(`instructions-20261128T125921Z.json`). Medians: 1p 3,375 against 2,794 msg/s "
    "(1.21x), 32p 8,472 against 4,613 (1.84x), 8p 7,396 against 5,508 (1.34x). At 32p "
    "Shoal's broker used 82 us of CPU per message (75-88) and its client 156 (136-168); "
    "ActiveMQ 233 and 197; the null sink 37 and 129, at 12,522 msg/s. Both cores were "
    "full, so msg/s follows broker plus client CPU: 238 against 430 us. 2x needed Shoal's "
    "broker at or below about 59 us with this run's client cost. Its 32p broker CPU is no "
    "lower than b368a6e's run (80 us, `20261128T104534Z-single`) although it executes "
    "17% fewer instructions: rep to rep this machine moves more than that.",
    "20261128T104534Z-single": "W6, five reps, with the null sink, on build b368a6e: the "
    "STOMP session, its output and read pacing, the journal's sync pipeline, writer and "
    "index state compiled with mypyc, and RECEIPTs written without a frame event "
    "(`StompConnection.send_receipt`). Its broker executes 0.80x the instructions per "
    "message of 89dda62 at 32p and 0.77x at 1p (`instructions-20261128T104533Z.json`), "
    "but this hour was slower for Shoal than the run before it on 89dda62 "
    "(`20261128T092831Z-single`, 55 minutes earlier): 32p broker CPU per message 68-112 us "
    "(median 80) against 70-102 (73), its client's 144-196 against 131-171, and the null "
    "sink's own 32p reps spread from 11,765 to 21,271 msg/s. Medians: 1p 2,443 against "
    "2,035 msg/s (1.20x), 32p 8,077 against 4,159 (1.94x); 89dda62 measured 1.195x and "
    "2.07x. The five W6 runs since 04:06 UTC (builds f2eddf6 to b368a6e) put 32p at "
    "1.73-2.07x and 1p at 1.15-1.38x: the ratio follows the hour more than the build.",
    "20261128T092831Z-single": "W6, five reps, with the null sink, on build 89dda62 (the "
    "last build of 2026-11-28's earlier session, unchanged for W6 since 0f64b06 but for "
    "auto-ack bookkeeping W6 does not use), at a quieter hour: Shoal's 32p broker CPU per "
    "message 70-102 us and its client's 131-171, ActiveMQ's 210-243 and 197-216. Medians: "
    "1p 3,271 against 2,737 msg/s (1.195x, a hair under the 1.2x goal; the three runs "
    "before it today measured 1.15x, 1.29x and 1.38x), 32p 9,159 against 4,422 (2.07x, the "
    "first W6 run of the day to reach 2x: `20261128T040607Z-single`, "
    '`20261128T043959Z-single` and `20261128T050014Z-single`, in "Other recent runs", '
    "measured 1.92x, 1.76x and 1.73x). Both figures move with the machine's hour by more "
    "than either goal's margin.",
    "20261128T050014Z-single": "W6, five reps, with the null sink, on build 0f64b06 (a "
    "round's receipts go out in one io_uring enter when more than two producers wait on it; "
    'docs/journal.md, "Writing"). The machine was slow this hour for both brokers: Shoal\'s '
    "32p broker CPU per message 112-125 us in four of five reps (89 in the first) and its "
    "client's 199-213 (161), against 78-99 and 141-165 in `20261128T040607Z-single` an hour earlier (build f2eddf6), and ActiveMQ's "
    "client 228-273 against 169-203. Medians: 1p 2,858 against 2,069 msg/s (1.38x), 32p "
    '6,153 against 3,566 (1.73x). The two other W6 runs of the day, both in "Other recent '
    'runs": `20261128T040607Z-single` (f2eddf6) 1p 3,153 against 2,748 (1.15x), 32p 8,869 '
    "against 4,628 (1.92x); `20261128T043959Z-single` (1d3dc46) 1p 3,288 against 2,547 "
    "(1.29x), 32p 8,540 against 4,856 (1.76x), where the null sink's last reps ran beside "
    "ad hoc broker runs of ours, so its ceiling there is low; Shoal's and ActiveMQ's reps "
    "had finished before. At 32p the machine's two cores are full: the client's CPU per "
    "message is as large as the broker's, so the ratio moves with both.",
    "20261128T013318Z-single": "W6 again, five reps, with the null sink, on build d23c065 "
    "(receipts ride on the journal write when at most two connections wait on a round; "
    'docs/journal.md, "Writing"). ActiveMQ measured faster than in '
    "`20261127T173103Z-single` (1p 1,590 against 1,450 msg/s; 32p 2,388 against 2,553), "
    "and Shoal about the same at 1p (1,537 against 1,549) and slower at 32p (3,761 against "
    "4,588). The same code with and without the rides, and this build against a6758d3, "
    'measured side by side in "Two builds side by side" '
    "(`builds-20261128T011534Z.json`, `builds-20261128T015631Z.json`), differ by a few "
    "percent at most, so the 32p drop is this machine's speed that hour, not the change. "
    "A run three reps long on e23caef, twenty minutes earlier "
    '(`20261128T011647Z-single`, shown in "Other recent runs"), measured 1p 0.98x, 8p 1.29x '
    "and 32p 1.62x ActiveMQ's msg/s.",
    "20261127T185801Z-single": "The rest of the matrix (W3, W5, W7, W8) on the compiled "
    "core, build 3410c2a (its broker code is 1045e4c's: a cluster fix outside these "
    "paths, then docs). The machine was far slower than for the matrix of 2026-11-25 "
    "for both brokers (ActiveMQ's W3 16,146 msg/s against 56,971 then, Shoal's 28,584 "
    "against 74,969), so compare ratios: W3 1.77x ActiveMQ's msg/s at 0.36x its CPU "
    "(1.32x and 0.42x then), W8 1.45x at 0.46x (1.43x, 0.52x), W7 unloaded 0.59x its "
    "CPU (0.35x). W5's p99 target reads missed on medians of 2.0 against 1.8 ms; per "
    "rep Shoal had 1.0, 2.0 and 2.0 ms, ActiveMQ 1.1, 2.0 and 1.8: within this "
    "machine's noise at 5,000 msg/s, where both run far below their capacity. W8's "
    "256 B of RSS per group is 16 B more than the 2026-11-25 matrix's 240: a compiled "
    "`Group` is a native object with a vtable pointer, 152 bytes against 144 as a "
    "slotted Python object (`sys.getsizeof(Group(key))`, compiled and with "
    "SHOAL_PURE=1), and the allocator rounds the rest; still under the 300 B target.",
    "20261127T173103Z-single": "The first run with the broker core compiled (4bc6645 to "
    '95d36c3; README, "Compiled hot path"). Shoal\'s rows name two builds: W1 started '
    "on 95d36c3, the rest on 7b90947, a commit that changed README.md, bench/ and "
    "bench/recorded only, so the broker's code is the same. RabbitMQ was not in this "
    'run (hence its "not yet measured"; its last rows are in '
    "`bench/recorded/20261127T133643Z-single.json`). ActiveMQ's W1 measured faster than "
    "in that run (22,888 against 17,198 msg/s; its W2 2% slower, 9,936 against 10,101), "
    "so W1's ratio is not a slow ActiveMQ's: Shoal's W1 went from 32,109 to 51,114 "
    "msg/s and from 31 to 18 us of broker CPU per message. The instruction counts of "
    "the same change, which move far less with the machine's mood (the same base "
    "build counted 1.4% apart in two runs, W1 90,835 and 89,528), are in "
    '"Instructions per message": W1 0.80x, W2 0.89x, W4 0.79x.',
    "20261127T133643Z-single": "The first run with RabbitMQ in W1, W2, W4 and W6 (its "
    "STOMP plugin; no message groups). Shoal ran build f51e55d: the broker's code of "
    "fb20aab, the commits after it changed bench/ and docs/ only. The null sink was not "
    'in this run, hence the ceiling rows\' "not yet measured": its last recorded '
    "ceilings, `bench/recorded/20261127T093109Z-single.json` (same client, another "
    "run), are 83,542 (W1), 89,286 (W2) and 82,944 (W4) msg/s. ActiveMQ measured "
    "slower in W1 than in that run (17,198 against 22,276 msg/s) while Shoal did not "
    "(32,109 against 32,501): the 1.87x is partly this run's ActiveMQ.",
    "20261127T093109Z-single": "This run's Shoal ran from a worktree of 03011d8 "
    "(`/work/bench-wt`, compiled, its `src` first on `PYTHONPATH`), with the null sink: "
    "the first recorded client ceiling. Shoal's W2 and W4 measured lower than in "
    "`20261127T071033Z-single` (build 5b995cb): 21,806 against 27,711 and 30,984 against "
    "38,071 msg/s. Counted in instructions, the broker did not change between those "
    "builds: `python -m bench.instructions --base 5b995cb --compile --workload W2 "
    "--workload W4` measured 127,176 / 127,293 (W2) and 88,111 / 88,302 (W4) "
    "instructions per message (`bench/recorded/instructions-20261127T101519Z.json`).",
}


AMQP_BUILD_NOTES = {
    "amqp-builds-20261125T123539Z.json": "Head: the mapping reads and sets the "
    "`pn_message_t` fields through Proton's C API, and connections recycle messages "
    "into one shared pool of up to 512 (was 8 per connection). A loaded machine.",
    "amqp-builds-20261125T122813Z.json": "Head c9702bf: as the run above but before "
    "its last commit (a NULL test before reading a mostly unset field, one error check "
    "for `message_of`'s setters: about 0.1 us in the in-process loop). A quieter machine.",
    "amqp-builds-20261125T121718Z.json": "Head is the branch after merging main, whose "
    "mapping (`server/amqp_mapping.py`) now also reads message-id, user-id, "
    "content-encoding and typed properties: about 1.3 us more in `headers_of` in the "
    "in-process loop. `uptime` read a load average of 25.9 at the run's start.",
    "amqp-builds-20261125T120952Z.json": "Before that merge. `uptime` read a load "
    "average of 5.7 at the run's start (not recorded in the file).",
    "amqp-builds-20261125T120533Z.json": "Before that merge, with up to 64 recycled "
    "messages per connection (now 8). `uptime` read a load average of 20.7 at the run's "
    "start (not recorded in the file).",
}


# What the page says of a matrix run, under its heading.
MATRIX_NOTES: dict[str, str] = {
    "20261128T145544Z-matrix": "The whole matrix on one build, cbb5184 (the broker of "
    "3718afe; the commits after it changed bench/ and the docs only), and the first with "
    "`--interleave`: each workload's brokers were started together and took turns rep by "
    "rep, the order flipping every rep, so a slow spell of the machine fell on all of "
    "them. Every goal of issue 17 reads met in it: W1 2.79x ActiveMQ's msg/s at 0.23x its "
    "broker CPU per message, W2 3.92x, W4 3.18x, W6 1p 1.33x, W6 32p 2.04x. The W6 32p "
    "margin is thin: rep by rep 2.56x, 2.08x and 1.90x. The W6-only run before it "
    "(`20261128T144333Z-single`, five reps, interleaved, the same broker, in 'Other recent "
    "runs') measured 2.04x as well, rep by rep 1.97-2.16x.",
}


# What the page says under the before/after table, for that pair of matrix runs.
MATRIX_PAIR_NOTES = {
    ("20261125T153018Z-matrix", "20261128T145544Z-matrix"): (
        "Between the two matrices the broker's hot path was compiled with mypyc (issue "
        "17). Against ActiveMQ every row moved Shoal's way but W5's and W7's CPU ratios "
        "(0.48x -> 0.63x, 0.35x -> 0.46x): they run at a fixed rate far below capacity, "
        "where CPU per message is mostly idle wake-ups and spreads widely (ActiveMQ's W7 "
        "unloaded reps: 156, 213 and 324 us). Four of Shoal's own figures read worse, and "
        "the builds side by side, "
        "the 'before' matrix's build c665ff4 against cbb5184 in one run, say the machine "
        "moved, not the code: W5's CPU per message 36 -> 64 us (ActiveMQ's 75 -> 102), "
        "side by side 0.93x (`builds-20261128T154728Z.json`); W7's 60 -> 98 and 72 -> 114 "
        "us (ActiveMQ's unloaded 172 -> 213), side by side 0.93x and 0.93x over seven reps "
        "(`builds-20261128T155259Z.json`); W6 1p and 8p msg/s 4,012 -> 3,106 and 9,500 -> "
        "8,150, while ActiveMQ's fell further (3,453 -> 2,329, 7,058 -> 5,668): a receipted "
        "persistent SEND waits on the disk's flush (side by side: "
        "1p 1.35x msg/s at 0.81x the CPU, 8p 1.05x at 0.91x, `builds-20261128T155512Z.json`). "
        "W8's RSS per group, 240 -> 258 B, is the compiled "
        "`Group`: a native object with a vtable pointer, 152 bytes against 144 as a slotted "
        "Python object (`python -c 'import sys; from shoal.broker.groups import Group; "
        'print(sys.getsizeof(Group("k")))\'`, compiled and with SHOAL_PURE=1), still under '
        "the 300 B target."
    ),
    ("20261125T130354Z-matrix", "20261125T153018Z-matrix"): (
        "W8 before was measured with the three reps on one broker, each from a baseline "
        "the previous rep had already raised; since then every rep runs on a fresh "
        "broker, which is what a user sees (issue 17). W5 and W7 run at a fixed rate: "
        "their CPU per message counts idle wake-ups as much as messages."
        "\n\n"
        "Between `20261125T130354Z` and `20261125T153018Z` the machine, not the code, "
        "got slower for Shoal's unreceipted STOMP traffic: the build the 'before' "
        "matrix ran (e2a0264, compiled), measured again at 16:13 UTC right before "
        "this session's build, gave W1 78,638 msg/s at 12 µs and W4 83,447 at 11 µs "
        "(`20261125T161320Z-single`), this session's build W1 83,653 at 11 µs and W4 "
        "86,137 at 11 µs (`20261125T161411Z-single`), both in 'Other recent runs' "
        "below; the 'before' matrix had 9.3 and 8.6 µs. ActiveMQ's W6 8p-nodisk "
        "(receipted, no disk) fell as much as Shoal's (0.66× and 0.68×). The "
        "receipted persistent rows (W6 1p, 8p) are the ones this session's io_uring "
        "syncs changed (docs/journal.md; builds side by side in 'Profiles')."
    ),
}
