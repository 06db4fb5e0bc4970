package autorecovery.interop;

import java.io.BufferedWriter;
import java.io.File;
import java.io.FileWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.zip.CRC32;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * Continuous writes by upstream's client, the way a Pulsar broker's managed ledgers write, for the chaos
 * campaign on a stock cluster (autorecovery/testing/chaos_stock.py).
 *
 * <pre>
 * continuous --conf CLIENT_CONF --ack-log PATH --stop-file PATH [--writers N] [--entry-size BYTES]
 *            [--rate ENTRIES_PER_S_PER_WRITER] [--roll-entries K] [--window ADDS] [--password PW]
 * </pre>
 *
 * <p>Writer {@code i} (a thread) writes ledgers of shape E3/WQ2/AQ2 for even {@code i}, E5/WQ3/AQ2 for
 * odd {@code i}, with digest CRC32C for {@code i mod 4 < 2}, MAC otherwise, each created with Pulsar's
 * custom metadata ({@code application=pulsar}, {@code component=managed-ledger},
 * {@code pulsar/managed-ledger=<name>}). As a managed ledger does, it rolls over to a new ledger after
 * {@code --roll-entries} entries, and at once when an add fails (the failed ledger is closed, a new one
 * created; creation is retried every 0.5 s while it fails). Entry payloads are {@link Payload}'s.
 *
 * <p>Every acknowledged entry is appended to the ack log as one line
 * {@code <ledger id> <entry id> <crc32 of the payload, 8 hex digits> <digest type>} (flushed every
 * 200 ms and at the end). When the stop file exists, each writer waits for its adds in flight, closes its
 * ledger, and the tool prints one JSON line ({@code ok, acked, adds_failed, ledgers_created,
 * create_failures, close_failures, entry_id_mismatches}) and exits 0.
 */
final class ContinuousWriter {
    private static final int[][] SHAPES = {{3, 2, 2}, {5, 3, 2}};
    private static final DigestType[] DIGESTS = {DigestType.CRC32C, DigestType.MAC};

    private final BookKeeper bk;
    private final BufferedWriter ackLog;
    private final File stopFile;
    private final int entrySize;
    private final double rate;
    private final int rollEntries;
    private final int window;
    private final byte[] password;
    private final AtomicLong acked = new AtomicLong();
    private final AtomicLong addsFailed = new AtomicLong();
    private final AtomicLong created = new AtomicLong();
    private final AtomicLong createFailures = new AtomicLong();
    private final AtomicLong closeFailures = new AtomicLong();
    private final AtomicLong mismatches = new AtomicLong();

    private ContinuousWriter(BookKeeper bk, BufferedWriter ackLog, File stopFile, int entrySize, double rate,
                             int rollEntries, int window, byte[] password) {
        this.bk = bk;
        this.ackLog = ackLog;
        this.stopFile = stopFile;
        this.entrySize = entrySize;
        this.rate = rate;
        this.rollEntries = rollEntries;
        this.window = window;
        this.password = password;
    }

    /** {@code argv[0]} is "continuous"; the options follow. Returns the exit status. */
    static int run(String[] argv) throws Exception {
        Map<String, String> opts = new LinkedHashMap<>();
        java.util.Set<String> known = java.util.Set.of("--conf", "--ack-log", "--stop-file", "--writers",
                "--entry-size", "--rate", "--roll-entries", "--window", "--password");
        for (int i = 1; i < argv.length; i++) {
            if (!known.contains(argv[i])) {
                throw new BkTool.UsageError("continuous: unknown option " + argv[i] + " (known: " + known + ")");
            }
            if (i + 1 >= argv.length) {
                throw new BkTool.UsageError(argv[i] + " needs a value");
            }
            opts.put(argv[i], argv[++i]);
        }
        for (String required : new String[] {"--conf", "--ack-log", "--stop-file"}) {
            if (!opts.containsKey(required)) {
                throw new BkTool.UsageError("continuous needs " + required);
            }
        }
        int writers = positive(opts, "--writers", "4");
        int entrySize = positive(opts, "--entry-size", "512");
        int rollEntries = positive(opts, "--roll-entries", "2000");
        int window = positive(opts, "--window", "16");
        double rate;
        try {
            rate = Double.parseDouble(opts.getOrDefault("--rate", "20"));
        } catch (NumberFormatException e) {
            throw new BkTool.UsageError("--rate " + opts.get("--rate") + ": not a number");
        }
        if (!(rate > 0)) {
            throw new BkTool.UsageError("--rate must be > 0");
        }
        File confFile = new File(opts.get("--conf"));
        if (!confFile.isFile()) {
            throw new BkTool.UsageError("--conf " + confFile + ": no such file");
        }
        ClientConfiguration conf = new ClientConfiguration();
        conf.loadConf(confFile.toURI().toURL());
        BookKeeper bk = new BookKeeper(conf);
        BufferedWriter log = new BufferedWriter(new FileWriter(opts.get("--ack-log"), StandardCharsets.US_ASCII, true));
        ContinuousWriter cw = new ContinuousWriter(bk, log, new File(opts.get("--stop-file")), entrySize, rate,
                rollEntries, window, opts.getOrDefault("--password", "").getBytes(StandardCharsets.UTF_8));
        Thread flusher = new Thread(cw::flushLoop, "ack-log-flusher");
        flusher.setDaemon(true);
        flusher.start();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < writers; i++) {
            final int slot = i;
            Thread t = new Thread(() -> cw.writeLoop(slot), "writer-" + i);
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        cw.flush();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "continuous");
        out.put("ok", cw.mismatches.get() == 0);
        out.put("acked", cw.acked.get());
        out.put("adds_failed", cw.addsFailed.get());
        out.put("ledgers_created", cw.created.get());
        out.put("create_failures", cw.createFailures.get());
        out.put("close_failures", cw.closeFailures.get());
        out.put("entry_id_mismatches", cw.mismatches.get());
        BkTool.print(out);
        log.close();
        return 0;
    }

    private static int positive(Map<String, String> opts, String name, String dflt) {
        String s = opts.getOrDefault(name, dflt);
        try {
            int v = Integer.parseInt(s);
            if (v >= 1) {
                return v;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new BkTool.UsageError(name + " " + s + ": must be an integer >= 1");
    }

    private boolean stopped() {
        return stopFile.exists();
    }

    private synchronized void logAck(long ledgerId, long entryId, byte[] data, DigestType digest) {
        CRC32 crc = new CRC32();
        crc.update(data);
        try {
            ackLog.write(ledgerId + " " + entryId + " " + String.format("%08x", crc.getValue()) + " " + digest + "\n");
        } catch (IOException e) {
            throw new IllegalStateException("ack log write failed", e);
        }
    }

    private synchronized void flush() {
        try {
            ackLog.flush();
        } catch (IOException e) {
            throw new IllegalStateException("ack log flush failed", e);
        }
    }

    private void flushLoop() {
        while (true) {
            flush();
            try {
                Thread.sleep(200); // the flush period
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    private LedgerHandle create(int slot) throws InterruptedException {
        int[] shape = SHAPES[slot % 2];
        DigestType digest = DIGESTS[(slot / 2) % 2];
        Map<String, byte[]> md = new LinkedHashMap<>();
        md.put("application", "pulsar".getBytes(StandardCharsets.UTF_8));
        md.put("component", "managed-ledger".getBytes(StandardCharsets.UTF_8));
        md.put("pulsar/managed-ledger", ("public/default/persistent/chaos-" + slot).getBytes(StandardCharsets.UTF_8));
        while (!stopped()) {
            try {
                LedgerHandle lh = bk.createLedger(shape[0], shape[1], shape[2], digest, password, md);
                created.incrementAndGet();
                return lh;
            } catch (BKException e) {
                createFailures.incrementAndGet();
                Thread.sleep(500); // the retry pause of a failed create, as a broker backs off
            }
        }
        return null;
    }

    private void writeLoop(int slot) {
        Payload payload = new Payload(entrySize);
        DigestType digest = DIGESTS[(slot / 2) % 2];
        long periodNanos = (long) (1e9 / rate);
        Semaphore inFlight = new Semaphore(window);
        try {
            while (!stopped()) {
                LedgerHandle lh = create(slot);
                if (lh == null) {
                    break;
                }
                final java.util.concurrent.atomic.AtomicBoolean failed = new java.util.concurrent.atomic.AtomicBoolean();
                long next = System.nanoTime();
                for (long e = 0; e < rollEntries && !failed.get() && !stopped(); e++) {
                    long wait = next - System.nanoTime();
                    if (wait > 0) {
                        TimeUnit.NANOSECONDS.sleep(wait); // pacing the writer's rate
                    }
                    next += periodNanos;
                    inFlight.acquire();
                    final long expected = e;
                    final byte[] data = payload.entry(lh.getId(), e);
                    lh.asyncAddEntry(data, (rc, handle, entryId, ctx) -> {
                        if (rc == BKException.Code.OK) {
                            if (entryId != expected) {
                                mismatches.incrementAndGet();
                            } else {
                                logAck(handle.getId(), entryId, data, digest);
                                acked.incrementAndGet();
                            }
                        } else {
                            addsFailed.incrementAndGet();
                            failed.set(true);
                        }
                        inFlight.release();
                    }, null);
                }
                inFlight.acquire(window);
                inFlight.release(window);
                try {
                    lh.closeAsync().get(60, TimeUnit.SECONDS);
                } catch (Exception ex) {
                    closeFailures.incrementAndGet();
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
