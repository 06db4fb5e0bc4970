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
import java.util.concurrent.locks.LockSupport;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * A foreground client for benchmarks: upstream's client adding entries at a fixed rate, round robin
 * over a few open ledgers, recording each add's latency, so a bench can tell what a heal costs the
 * cluster's own clients (the publish latency Pulsar users see while AutoRecovery runs).
 *
 * <pre>
 * ratewriter --conf CLIENT_CONF --out PATH --stop-file PATH [--rate ADDS_PER_S] [--entry-size BYTES]
 *            [--ledgers N] [--ensemble E] [--wq W] [--aq A] [--max-in-flight ADDS] [--password PW]
 * </pre>
 *
 * <p>Defaults: 300 adds/s of 1024 bytes over 4 ledgers of E3/WQ2/AQ2 (CRC32C, {@link Payload}'s
 * content), at most 10,000 adds in flight. Add {@code k} is due at {@code k / rate} s after the start;
 * its latency is counted from that due time, not from when it was sent, so a writer held up (by the
 * in-flight cap, a GC pause, a slow bookie) is charged for the wait (no coordinated omission).
 *
 * <p>Once its ledgers exist it prints one JSON line ({@code ok, ledgers}). The out file gets one line
 * per completed add, {@code <due time, epoch microseconds> <latency microseconds> <rc>}, flushed every
 * 200 ms, and a line {@code # ledger <id>} for each ledger it creates. A ledger whose add failed is
 * replaced by a new one (the failed one is closed). When the stop file exists it waits (up to 30 s) for
 * the adds in flight, closes its ledgers, prints a JSON summary ({@code ok, adds, failed, ledgers}) and
 * exits 0.
 */
final class RateWriter {
    private RateWriter() {
    }

    private static int intOpt(Map<String, String> opts, String name, String dflt, int min) {
        String s = opts.getOrDefault(name, dflt);
        try {
            int v = Integer.parseInt(s);
            if (v >= min) {
                return v;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new BkTool.UsageError(name + " " + s + ": expected an integer >= " + min);
    }

    static int run(String[] argv) throws Exception {
        Map<String, String> opts = new LinkedHashMap<>();
        java.util.Set<String> known = java.util.Set.of("--conf", "--out", "--stop-file", "--rate", "--entry-size",
                "--ledgers", "--ensemble", "--wq", "--aq", "--max-in-flight", "--password");
        for (int i = 1; i < argv.length; i++) {
            if (!known.contains(argv[i])) {
                throw new BkTool.UsageError("ratewriter: unknown option " + argv[i] + " (known: " + known + ")");
            }
            if (i + 1 >= argv.length) {
                throw new BkTool.UsageError(argv[i] + " needs a value");
            }
            opts.put(argv[i], argv[++i]);
        }
        for (String required : new String[] {"--conf", "--out", "--stop-file"}) {
            if (!opts.containsKey(required)) {
                throw new BkTool.UsageError("ratewriter needs " + required);
            }
        }
        double rate;
        try {
            rate = Double.parseDouble(opts.getOrDefault("--rate", "300"));
        } catch (NumberFormatException e) {
            throw new BkTool.UsageError("--rate " + opts.get("--rate") + ": not a number");
        }
        if (!(rate > 0)) {
            throw new BkTool.UsageError("--rate must be > 0");
        }
        int size = intOpt(opts, "--entry-size", "1024", 1);
        int nLedgers = intOpt(opts, "--ledgers", "4", 1);
        int ensemble = intOpt(opts, "--ensemble", "3", 1);
        int wq = intOpt(opts, "--wq", "2", 1);
        int aq = intOpt(opts, "--aq", "2", 1);
        int maxInFlight = intOpt(opts, "--max-in-flight", "10000", 1);
        if (!(aq <= wq && wq <= ensemble)) {
            throw new BkTool.UsageError("need --aq <= --wq <= --ensemble, got " + aq + "/" + wq + "/" + ensemble);
        }
        File confFile = new File(opts.get("--conf"));
        if (!confFile.isFile()) {
            throw new BkTool.UsageError("--conf " + confFile + ": no such file");
        }
        File stopFile = new File(opts.get("--stop-file"));
        byte[] pw = opts.getOrDefault("--password", "").getBytes(StandardCharsets.UTF_8);
        ClientConfiguration conf = new ClientConfiguration();
        conf.loadConf(confFile.toURI().toURL());
        BookKeeper bk = new BookKeeper(conf);
        BufferedWriter out = new BufferedWriter(new FileWriter(opts.get("--out"), StandardCharsets.US_ASCII, true));

        LedgerHandle[] slots = new LedgerHandle[nLedgers];
        boolean[] broken = new boolean[nLedgers];
        long[] nextEntry = new long[nLedgers];
        List<Long> created = new ArrayList<>();
        for (int i = 0; i < nLedgers; i++) {
            slots[i] = bk.createLedger(ensemble, wq, aq, DigestType.CRC32C, pw);
            created.add(slots[i].getId());
            synchronized (out) {
                out.write("# ledger " + slots[i].getId() + "\n");
            }
        }
        Map<String, Object> hello = new LinkedHashMap<>();
        hello.put("command", "ratewriter");
        hello.put("ok", true);
        hello.put("ledgers", new ArrayList<>(created));
        BkTool.print(hello);

        Thread flusher = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(200);
                    synchronized (out) {
                        out.flush();
                    }
                } catch (InterruptedException | IOException e) {
                    return;
                }
            }
        }, "latency-log-flusher");
        flusher.setDaemon(true);
        flusher.start();

        Payload payload = new Payload(size);
        Semaphore inFlight = new Semaphore(maxInFlight);
        AtomicLong adds = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        long nano0 = System.nanoTime();
        long epoch0Micros = System.currentTimeMillis() * 1000;
        double periodNanos = 1e9 / rate;
        for (long k = 0; !stopFile.exists(); k++) {
            long dueNanos = nano0 + (long) (k * periodNanos);
            long wait = dueNanos - System.nanoTime();
            if (wait > 0) {
                LockSupport.parkNanos(wait);
            }
            int slot = (int) (k % nLedgers);
            synchronized (broken) {
                if (broken[slot]) {
                    LedgerHandle old = slots[slot];
                    old.closeAsync();
                    slots[slot] = bk.createLedger(ensemble, wq, aq, DigestType.CRC32C, pw);
                    nextEntry[slot] = 0;
                    broken[slot] = false;
                    created.add(slots[slot].getId());
                    synchronized (out) {
                        out.write("# ledger " + slots[slot].getId() + "\n");
                    }
                }
            }
            inFlight.acquire();
            final long dueEpochMicros = epoch0Micros + (long) (k * periodNanos / 1000);
            final long due = dueNanos;
            final LedgerHandle lh = slots[slot];
            lh.asyncAddEntry(payload.entry(lh.getId(), nextEntry[slot]++), (rc, h, entryId, ctx) -> {
                long latencyMicros = (System.nanoTime() - due) / 1000;
                adds.incrementAndGet();
                if (rc != BKException.Code.OK) {
                    failed.incrementAndGet();
                    synchronized (broken) {
                        if (slots[slot] == h) {
                            broken[slot] = true;
                        }
                    }
                }
                try {
                    synchronized (out) {
                        out.write(dueEpochMicros + " " + latencyMicros + " " + rc + "\n");
                    }
                } catch (IOException e) {
                    // the summary still counts it
                }
                inFlight.release();
            }, null);
        }
        boolean drained = inFlight.tryAcquire(maxInFlight, 30, TimeUnit.SECONDS);
        for (LedgerHandle lh : slots) {
            try {
                lh.close();
            } catch (Exception e) {
                // a ledger whose add failed may not close; the summary says how many adds failed
            }
        }
        synchronized (out) {
            out.flush();
        }
        Map<String, Object> summary = new LinkedHashMap<>();
        summary.put("command", "ratewriter");
        summary.put("ok", drained);
        summary.put("adds", adds.get());
        summary.put("failed", failed.get());
        summary.put("ledgers", created);
        BkTool.print(summary);
        return 0;
    }
}
