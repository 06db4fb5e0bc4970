package autorecovery.interop;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.client.EnsemblePlacementPolicy.PlacementPolicyAdherence;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.net.BookieId;

/**
 * Stock BookKeeper 4.17 client driven from the interop tests: write, read and inspect ledgers with
 * upstream's own client library, printing one JSON line of results on stdout.
 *
 * <pre>
 * write     --zk HOST:PORT --root /path/ledgers --ledgers N --entries M --entry-size BYTES
 *           --ensemble E --wq W --aq A [--digest CRC32C|CRC32|MAC|DUMMY] [--password PW]
 *           [--open K] [--window ADDS] [--conf CLIENT_CONF]
 * read      --zk ... --root ... [--password PW] [--digest D] [--recover] (--all | LEDGER_ID...)
 * ensembles --zk ... --root ... (--all | LEDGER_ID...)
 * placement --conf CLIENT_CONF (--all | LEDGER_ID...)   (upstream's Auditor placement check, each segment)
 * payload   --ledger L --entry E --entry-size BYTES   (the deterministic payload, base64; no cluster)
 * continuous --conf CLIENT_CONF --ack-log PATH --stop-file PATH ...   (see ContinuousWriter)
 * copyceiling --conf CLIENT_CONF --victim ID --bookies ID,... LEDGER_ID...   (see CopyCeiling)
 * ratewriter --conf CLIENT_CONF --out PATH --stop-file PATH ...   (see RateWriter)
 * </pre>
 *
 * <p>{@code --conf} loads a client configuration file first (placement policy, rack script...);
 * {@code --zk}/{@code --root} then set {@code metadataServiceUri}. Exit status: 0 when every ledger
 * was fine, 1 when a result carries an error, 2 on bad usage (one line on stderr). With
 * {@code --open K} the writer leaves its last K ledgers open, prints its JSON and sleeps until killed.
 */
public final class BkTool {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long MIB = 1024 * 1024;

    private BkTool() {
    }

    /** Bad command line: reported as one line on stderr, exit status 2. */
    static final class UsageError extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageError(String message) {
            super(message);
        }
    }

    /**
     * Runs a command and exits. The BookKeeper client is not closed: its close() waits ~2 s for a
     * worker pool, and exiting drops the connections and the ZooKeeper session (which holds no
     * ephemeral znodes) just the same.
     */
    public static void main(String[] argv) {
        int status;
        try {
            status = run(argv);
        } catch (UsageError e) {
            System.err.println("error: " + e.getMessage());
            status = 2;
        } catch (Exception e) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("command", argv.length > 0 ? argv[0] : "");
            out.put("ok", false);
            out.put("error", e.toString());
            print(out);
            status = 1;
        }
        System.exit(status);
    }

    static int run(String[] argv) throws Exception {
        if (argv.length == 0) {
            throw new UsageError("usage: BkTool write|read|ensembles|placement|payload [options] (see the class comment)");
        }
        String command = argv[0];
        if ("continuous".equals(command)) {  // its own options: see ContinuousWriter
            return ContinuousWriter.run(argv);
        }
        if ("copyceiling".equals(command)) {  // its own options: see CopyCeiling
            return CopyCeiling.run(argv);
        }
        if ("ratewriter".equals(command)) {  // its own options: see RateWriter
            return RateWriter.run(argv);
        }
        Args args = Args.parse(argv, 1);
        switch (command) {
            case "write":
                return write(args);
            case "read":
                return read(args);
            case "ensembles":
                return ensembles(args);
            case "placement":
                return placement(args);
            case "payload":
                return payload(args);
            default:
                throw new UsageError("unknown command " + command + " (write, read, ensembles, placement, payload)");
        }
    }

    // -- client set-up ---------------------------------------------------------------------------

    static ClientConfiguration clientConf(Args args) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        String file = args.value("--conf", null);
        if (file != null) {
            File f = new File(file);
            if (!f.isFile()) {
                throw new UsageError("--conf " + file + ": no such file");
            }
            conf.loadConf(f.toURI().toURL());
        }
        String zk = args.value("--zk", null);
        String root = args.value("--root", null);
        if (zk != null || root != null) {
            if (zk == null || root == null || !root.startsWith("/")) {
                throw new UsageError("--zk HOST:PORT and --root /absolute/ledgers/path go together");
            }
            conf.setMetadataServiceUri("zk+hierarchical://" + zk.replace(',', ';') + root);
        } else if (file == null) {
            throw new UsageError("give --zk and --root, or --conf CLIENT_CONF");
        }
        return conf;
    }

    static DigestType digest(Args args) {
        String name = args.value("--digest", "CRC32C").toUpperCase();
        try {
            return DigestType.valueOf(name);
        } catch (IllegalArgumentException e) {
            throw new UsageError("--digest " + name + ": expected CRC32C, CRC32, MAC or DUMMY");
        }
    }

    static byte[] password(Args args) {
        return args.value("--password", "").getBytes(java.nio.charset.StandardCharsets.UTF_8);
    }

    // -- write -----------------------------------------------------------------------------------

    static int write(Args args) throws Exception {
        int ledgers = args.intValue("--ledgers", 1, 1);
        int entries = args.intValue("--entries", 100, 0);
        int size = args.intValue("--entry-size", 1024, 1);
        int ensemble = args.intValue("--ensemble", 3, 1);
        int wq = args.intValue("--wq", 2, 1);
        int aq = args.intValue("--aq", 2, 1);
        int open = args.intValue("--open", 0, 0);
        if (!(aq <= wq && wq <= ensemble)) {
            throw new UsageError("need --aq <= --wq <= --ensemble, got " + aq + "/" + wq + "/" + ensemble);
        }
        if (open > ledgers) {
            throw new UsageError("--open " + open + " is more than --ledgers " + ledgers);
        }
        long defaultWindow = Math.max(1, Math.min(2000, 32 * MIB / size));
        int window = args.intValue("--window", (int) defaultWindow, 1);
        args.noPositional();
        DigestType digestType = digest(args);
        byte[] pw = password(args);
        ClientConfiguration conf = clientConf(args);

        long start = System.nanoTime();
        BookKeeper bk = new BookKeeper(conf);
        LedgerHandle[] handles = new LedgerHandle[ledgers];
        for (int i = 0; i < ledgers; i++) {
            handles[i] = bk.createLedger(ensemble, wq, aq, digestType, pw);
        }
        AtomicLongArray lastAcked = new AtomicLongArray(ledgers);
        for (int i = 0; i < ledgers; i++) {
            lastAcked.set(i, -1);
        }
        AtomicReference<String> error = new AtomicReference<>();
        Semaphore inFlight = new Semaphore(window);
        Payload payload = new Payload(size);
        outer:
        for (long e = 0; e < entries; e++) {
            for (int i = 0; i < ledgers; i++) {
                inFlight.acquire();
                if (error.get() != null) {
                    inFlight.release();
                    break outer;
                }
                final int slot = i;
                handles[i].asyncAddEntry(payload.entry(handles[i].getId(), e), (rc, lh, entryId, ctx) -> {
                    if (rc == BKException.Code.OK) {
                        lastAcked.accumulateAndGet(slot, entryId, Math::max);
                    } else {
                        error.compareAndSet(null, "add to ledger " + lh.getId() + " failed: "
                                + BKException.getMessage(rc));
                    }
                    inFlight.release();
                }, null);
            }
        }
        inFlight.acquire(window);
        inFlight.release(window);
        List<CompletableFuture<Void>> closing = new ArrayList<>();
        for (int i = 0; i < ledgers - open && error.get() == null; i++) {
            closing.add(handles[i].closeAsync());
        }
        for (CompletableFuture<Void> c : closing) {
            try {
                c.get(60, TimeUnit.SECONDS);
            } catch (Exception e) {
                error.compareAndSet(null, "close failed: " + e);
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;

        List<Object> results = new ArrayList<>();
        for (int i = 0; i < ledgers; i++) {
            LedgerHandle lh = handles[i];
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("ledger", lh.getId());
            r.put("closed", lh.getLedgerMetadata().isClosed());
            r.put("last_acked", lastAcked.get(i));
            r.put("lac", lh.getLastAddConfirmed());
            r.put("ensembles", ensembleMap(lh.getLedgerMetadata()));
            results.add(r);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "write");
        out.put("ok", error.get() == null);
        out.put("error", error.get());
        out.put("seconds", seconds);
        out.put("bytes", (long) ledgers * entries * size);
        out.put("ledgers", results);
        print(out);
        if (error.get() != null) {
            return 1;
        }
        if (open > 0) {
            // keep the client (and its open ledgers) alive until the test kills or stops us
            while (true) {
                Thread.sleep(60_000);
            }
        }
        return 0;
    }

    // -- read ------------------------------------------------------------------------------------

    static int read(Args args) throws Exception {
        boolean recover = args.flag("--recover");
        boolean all = args.flag("--all");
        DigestType digestType = digest(args);
        byte[] pw = password(args);
        ClientConfiguration conf = clientConf(args);
        long start = System.nanoTime();
        BookKeeper bk = new BookKeeper(conf);
        List<Long> ids = ledgerIds(args, all, bk, conf);
        List<Object> results = new ArrayList<>();
        boolean ok = true;
        long bytes = 0;
        Map<Integer, Payload> payloads = new LinkedHashMap<>();
        for (long id : ids) {
            Map<String, Object> r = new LinkedHashMap<>();
            List<String> errors = new ArrayList<>();
            List<Long> badIds = new ArrayList<>();
            long read = 0;
            long bad = 0;
            r.put("ledger", id);
            try {
                LedgerHandle lh = recover ? bk.openLedger(id, digestType, pw)
                        : bk.openLedgerNoRecovery(id, digestType, pw);
                LedgerMetadata md = lh.getLedgerMetadata();
                long lac = lh.getLastAddConfirmed();
                long last = md.isClosed() ? md.getLastEntryId() : lac;
                r.put("closed", md.isClosed());
                r.put("lac", lac);
                r.put("last_entry_id", md.isClosed() ? md.getLastEntryId() : null);
                r.put("length", md.getLength());
                long batch = 100;
                if (md.isClosed() && last >= 0 && md.getLength() > 0) {
                    long avg = Math.max(1, md.getLength() / (last + 1));
                    batch = Math.max(1, Math.min(1000, 16 * MIB / avg));
                }
                for (long first = 0; first <= last; first += batch) {
                    long to = Math.min(last, first + batch - 1);
                    Enumeration<LedgerEntry> entries = lh.readEntries(first, to);
                    while (entries.hasMoreElements()) {
                        LedgerEntry entry = entries.nextElement();
                        byte[] data = entry.getEntry();
                        read++;
                        bytes += data.length;
                        Payload p = payloads.computeIfAbsent(data.length, Payload::new);
                        if (!p.matches(data, id, entry.getEntryId())) {
                            bad++;
                            if (badIds.size() < 10) {
                                badIds.add(entry.getEntryId());
                            }
                        }
                    }
                }
                lh.close();
            } catch (BKException e) {
                errors.add(e.getMessage());
            } catch (Exception e) {
                errors.add(e.toString());
            }
            r.put("entries_read", read);
            r.put("bad_entries", bad);
            r.put("bad_entry_ids", badIds);
            r.put("errors", errors);
            ok &= errors.isEmpty() && bad == 0;
            results.add(r);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "read");
        out.put("ok", ok);
        out.put("seconds", (System.nanoTime() - start) / 1e9);
        out.put("bytes", bytes);
        out.put("ledgers", results);
        print(out);
        return ok ? 0 : 1;
    }

    // -- ensembles -------------------------------------------------------------------------------

    static int ensembles(Args args) throws Exception {
        boolean all = args.flag("--all");
        ClientConfiguration conf = clientConf(args);
        BookKeeper bk = new BookKeeper(conf);
        List<Long> ids = ledgerIds(args, all, bk, conf);
        List<Object> results = new ArrayList<>();
        boolean ok = true;
        for (long id : ids) {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("ledger", id);
            try {
                LedgerMetadata md = bk.getLedgerManager().readLedgerMetadata(id).get(30, TimeUnit.SECONDS).getValue();
                r.put("closed", md.isClosed());
                r.put("last_entry_id", md.getLastEntryId());
                r.put("length", md.getLength());
                r.put("ensemble_size", md.getEnsembleSize());
                r.put("write_quorum", md.getWriteQuorumSize());
                r.put("ack_quorum", md.getAckQuorumSize());
                r.put("digest", md.getDigestType().toString());
                r.put("ensembles", ensembleMap(md));
            } catch (Exception e) {
                r.put("error", e.getCause() != null ? e.getCause().toString() : e.toString());
                ok = false;
            }
            results.add(r);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "ensembles");
        out.put("ok", ok);
        out.put("ledgers", results);
        print(out);
        return ok ? 0 : 1;
    }

    // -- placement -------------------------------------------------------------------------------

    /**
     * Upstream's Auditor placement check ({@code AuditorPlacementPolicyCheckTask.doPlacementPolicyCheck}),
     * run with this client's placement policy and racks: every segment of every closed ledger goes
     * through {@code BookKeeperAdmin.isEnsembleAdheringToPlacementPolicy(ensemble, WQ, AQ)}; open
     * ledgers are skipped as upstream skips them. Prints {@code {"command", "ok", "closed", "open",
     * "soft", "fail": [{"ledger", "first_entry", "ensemble"}], "errors": [...]}}; ok (exit 0) when
     * no segment FAILs and every ledger's metadata was read.
     */
    static int placement(Args args) throws Exception {
        boolean all = args.flag("--all");
        ClientConfiguration conf = clientConf(args);
        BookKeeper bk = new BookKeeper(conf);
        BookKeeperAdmin admin = new BookKeeperAdmin(bk, conf);
        List<Long> ids = ledgerIds(args, all, bk, conf);
        List<Object> fail = new ArrayList<>();
        List<Object> errors = new ArrayList<>();
        int closed = 0;
        int open = 0;
        int soft = 0;
        for (long id : ids) {
            LedgerMetadata md;
            try {
                md = bk.getLedgerManager().readLedgerMetadata(id).get(30, TimeUnit.SECONDS).getValue();
            } catch (Exception e) {
                Throwable c = e.getCause() != null ? e.getCause() : e;
                if (c instanceof BKException.BKNoSuchLedgerExistsOnMetadataServerException) {
                    continue;  // deleted since the listing
                }
                errors.add("ledger " + id + ": " + c);
                continue;
            }
            if (!md.isClosed()) {
                open++;
                continue;
            }
            closed++;
            boolean softly = false;
            for (Map.Entry<Long, ? extends List<BookieId>> seg : md.getAllEnsembles().entrySet()) {
                PlacementPolicyAdherence a = admin.isEnsembleAdheringToPlacementPolicy(
                        seg.getValue(), md.getWriteQuorumSize(), md.getAckQuorumSize());
                if (a == PlacementPolicyAdherence.FAIL) {
                    Map<String, Object> r = new LinkedHashMap<>();
                    r.put("ledger", id);
                    r.put("first_entry", seg.getKey());
                    List<String> ens = new ArrayList<>();
                    for (BookieId b : seg.getValue()) {
                        ens.add(b.toString());
                    }
                    r.put("ensemble", ens);
                    fail.add(r);
                } else if (a == PlacementPolicyAdherence.MEETS_SOFT) {
                    softly = true;
                }
            }
            if (softly) {
                soft++;
            }
        }
        boolean ok = fail.isEmpty() && errors.isEmpty();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "placement");
        out.put("ok", ok);
        out.put("closed", closed);
        out.put("open", open);
        out.put("soft", soft);
        out.put("fail", fail);
        out.put("errors", errors);
        print(out);
        return ok ? 0 : 1;
    }

    // -- payload ---------------------------------------------------------------------------------

    static int payload(Args args) {
        long ledger = args.longValue("--ledger", 0);
        long entry = args.longValue("--entry", 0);
        int size = args.intValue("--entry-size", 1024, 1);
        args.noPositional();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "payload");
        out.put("ok", true);
        out.put("base64", java.util.Base64.getEncoder().encodeToString(new Payload(size).entry(ledger, entry)));
        print(out);
        return 0;
    }

    // -- helpers ---------------------------------------------------------------------------------

    static List<Long> ledgerIds(Args args, boolean all, BookKeeper bk, ClientConfiguration conf) throws Exception {
        List<Long> ids = new ArrayList<>();
        if (all) {
            if (!args.positional.isEmpty()) {
                throw new UsageError("--all takes no ledger ids");
            }
            BookKeeperAdmin admin = new BookKeeperAdmin(bk, conf);
            for (Long id : admin.listLedgers()) {
                ids.add(id);
            }
            ids.sort(null);
            return ids;
        }
        if (args.positional.isEmpty()) {
            throw new UsageError("give ledger ids or --all");
        }
        for (String s : args.positional) {
            try {
                ids.add(Long.parseLong(s));
            } catch (NumberFormatException e) {
                throw new UsageError("ledger id " + s + " is not a number");
            }
        }
        return ids;
    }

    /** First entry id of each segment (as a string key) → bookie ids of its ensemble. */
    static Map<String, List<String>> ensembleMap(LedgerMetadata md) {
        Map<String, List<String>> out = new LinkedHashMap<>();
        for (Map.Entry<Long, ? extends List<BookieId>> seg : md.getAllEnsembles().entrySet()) {
            List<String> bookies = new ArrayList<>();
            for (BookieId b : seg.getValue()) {
                bookies.add(b.toString());
            }
            out.put(Long.toString(seg.getKey()), bookies);
        }
        return out;
    }

    static void print(Map<String, Object> out) {
        try {
            System.out.println(JSON.writeValueAsString(out));
        } catch (Exception e) {
            System.out.println("{\"ok\":false,\"error\":\"cannot encode the result: " + e + "\"}");
        }
        System.out.flush();
    }

    /** {@code --name value} options, {@code --flag} switches and positional arguments. */
    static final class Args {
        private static final java.util.Set<String> FLAGS = java.util.Set.of("--all", "--recover");
        private static final java.util.Set<String> VALUES = java.util.Set.of(
                "--zk", "--root", "--conf", "--ledgers", "--entries", "--entry-size", "--ensemble", "--wq", "--aq",
                "--digest", "--password", "--open", "--window", "--ledger", "--entry");
        final Map<String, String> values = new LinkedHashMap<>();
        final java.util.Set<String> flags = new java.util.HashSet<>();
        final List<String> positional = new ArrayList<>();

        static Args parse(String[] argv, int from) {
            Args a = new Args();
            for (int i = from; i < argv.length; i++) {
                String s = argv[i];
                if (FLAGS.contains(s)) {
                    a.flags.add(s);
                } else if (VALUES.contains(s)) {
                    if (i + 1 >= argv.length) {
                        throw new UsageError(s + " needs a value");
                    }
                    a.values.put(s, argv[++i]);
                } else if (s.startsWith("--")) {
                    throw new UsageError("unknown option " + s);
                } else {
                    a.positional.add(s);
                }
            }
            return a;
        }

        String value(String name, String dflt) {
            return values.getOrDefault(name, dflt);
        }

        boolean flag(String name) {
            return flags.contains(name);
        }

        int intValue(String name, int dflt, int min) {
            String s = values.get(name);
            if (s == null) {
                return dflt;
            }
            int v;
            try {
                v = Integer.parseInt(s);
            } catch (NumberFormatException e) {
                throw new UsageError(name + " " + s + ": not an integer");
            }
            if (v < min) {
                throw new UsageError(name + " " + s + ": must be at least " + min);
            }
            return v;
        }

        long longValue(String name, long dflt) {
            String s = values.get(name);
            if (s == null) {
                return dflt;
            }
            try {
                long v = Long.parseLong(s);
                if (v >= 0) {
                    return v;
                }
            } catch (NumberFormatException e) {
                // reported below
            }
            throw new UsageError(name + " " + s + ": not a non-negative integer");
        }

        void noPositional() {
            if (!positional.isEmpty()) {
                throw new UsageError("unexpected argument " + positional.get(0));
            }
        }
    }
}
