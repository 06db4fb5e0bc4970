package autorecovery.interop;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import java.io.File;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.client.api.WriteFlag;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.proto.BookieClient;
import org.apache.bookkeeper.proto.BookieProtocol;
import org.apache.bookkeeper.proto.checksum.MacDigestManager;
import org.apache.bookkeeper.util.ByteBufList;

/**
 * The cluster's own copy ceiling for one lost bookie: upstream's bookie client reads every entry the
 * lost bookie stored from a survivor that holds it and writes the stored bytes unchanged (header,
 * digest, payload) to a live bookie outside the segment's ensemble, as a recovery add, with up to
 * {@code --window-mb} MiB in flight. No metadata is read past the ledgers' own, none is written, no
 * digest is recomputed and no lock is taken (a failed read or write is tried again from the read, 3 attempts
 * in all): what is left is the bookies' and the client's copy cost.
 *
 * <pre>
 * copyceiling --conf CLIENT_CONF --victim BOOKIE_ID --bookies ID,ID,... [--password PW] [--window-mb MB]
 *             LEDGER_ID...
 * </pre>
 *
 * <p>{@code --bookies} are the live bookies (readers and targets). Entry {@code e} of a segment of
 * ensemble size {@code n} is stored on members {@code (e + k) mod n} for {@code k < wq} (upstream's
 * round-robin distribution schedule); it is read from the first of those that is not the victim, and
 * written to the live bookie outside the ensemble picked round robin by ledger id (with
 * {@code useV2WireProtocol} in the client conf, as v2 frames built here around the stored bytes). Prints one JSON line
 * ({@code ok, entries, planned, retries, bytes, timed_bytes, warmup_entries, seconds, ledgers, segments, error}:
 * the first {@code warmup_entries} copies (1 %, 50 to 500) open the connections and are not timed;
 * {@code seconds} and {@code timed_bytes} cover the rest; bytes are stored bytes: header, digest, payload); exit 0 when every copy succeeded.
 */
final class CopyCeiling {
    private CopyCeiling() {
    }

    static int run(String[] argv) throws Exception {
        Map<String, String> opts = new LinkedHashMap<>();
        List<Long> ids = new ArrayList<>();
        java.util.Set<String> known = java.util.Set.of("--conf", "--victim", "--bookies", "--password", "--window-mb");
        for (int i = 1; i < argv.length; i++) {
            if (argv[i].startsWith("--")) {
                if (!known.contains(argv[i])) {
                    throw new BkTool.UsageError("copyceiling: unknown option " + argv[i] + " (known: " + known + ")");
                }
                if (i + 1 >= argv.length) {
                    throw new BkTool.UsageError(argv[i] + " needs a value");
                }
                opts.put(argv[i], argv[++i]);
            } else {
                try {
                    ids.add(Long.parseLong(argv[i]));
                } catch (NumberFormatException e) {
                    throw new BkTool.UsageError("copyceiling: ledger id " + argv[i] + " is not a number");
                }
            }
        }
        for (String required : new String[] {"--conf", "--victim", "--bookies"}) {
            if (!opts.containsKey(required)) {
                throw new BkTool.UsageError("copyceiling needs " + required);
            }
        }
        if (ids.isEmpty()) {
            throw new BkTool.UsageError("copyceiling needs ledger ids");
        }
        long windowBytes;
        try {
            windowBytes = Long.parseLong(opts.getOrDefault("--window-mb", "64")) * 1024 * 1024;
        } catch (NumberFormatException e) {
            throw new BkTool.UsageError("--window-mb " + opts.get("--window-mb") + ": not an integer");
        }
        if (windowBytes <= 0 || windowBytes > Integer.MAX_VALUE) {
            throw new BkTool.UsageError("--window-mb must be between 1 and 2047");
        }
        File confFile = new File(opts.get("--conf"));
        if (!confFile.isFile()) {
            throw new BkTool.UsageError("--conf " + confFile + ": no such file");
        }
        BookieId victim = BookieId.parse(opts.get("--victim"));
        List<BookieId> live = new ArrayList<>();
        for (String s : opts.get("--bookies").split(",")) {
            if (!s.isBlank()) {
                live.add(BookieId.parse(s.trim()));
            }
        }
        byte[] masterKey = MacDigestManager.genDigest("ledger",
                opts.getOrDefault("--password", "").getBytes(java.nio.charset.StandardCharsets.UTF_8));

        ClientConfiguration conf = new ClientConfiguration();
        conf.loadConf(confFile.toURI().toURL());
        final boolean v2 = conf.getUseV2WireProtocol();
        BookKeeper bk = new BookKeeper(conf);
        // the client's own per-bookie connections (package-private accessor in 4.17)
        Method getter = BookKeeper.class.getDeclaredMethod("getBookieClient");
        getter.setAccessible(true);
        BookieClient client = (BookieClient) getter.invoke(bk);

        // plan first (metadata reads are not timed)
        List<long[]> copies = new ArrayList<>(); // {ledger, entry, reader index, target index, avg size}
        int segments = 0;
        for (long id : ids) {
            LedgerMetadata md = bk.getLedgerManager().readLedgerMetadata(id).get(30, TimeUnit.SECONDS).getValue();
            long last = md.getLastEntryId();
            long avg = last >= 0 ? Math.max(1, md.getLength() / (last + 1)) : 1;
            List<Map.Entry<Long, ? extends List<BookieId>>> segs = new ArrayList<>(md.getAllEnsembles().entrySet());
            for (int k = 0; k < segs.size(); k++) {
                List<BookieId> ens = segs.get(k).getValue();
                int idx = ens.indexOf(victim);
                if (idx < 0) {
                    continue;
                }
                segments++;
                long first = segs.get(k).getKey();
                long end = k + 1 < segs.size() ? segs.get(k + 1).getKey() - 1 : last;
                List<Integer> targets = new ArrayList<>();
                for (int b = 0; b < live.size(); b++) {
                    if (!ens.contains(live.get(b))) {
                        targets.add(b);
                    }
                }
                if (targets.isEmpty()) {
                    throw new IllegalStateException("ledger " + id + ": no live bookie outside ensemble " + ens);
                }
                int target = targets.get((int) (id % targets.size()));
                int n = ens.size();
                int wq = md.getWriteQuorumSize();
                for (long e = first; e <= end; e++) {
                    int reader = -1;
                    boolean stored = false;
                    for (int j = 0; j < wq; j++) {
                        int m = (int) ((e + j) % n);
                        if (m == idx) {
                            stored = true;
                        } else if (reader < 0 && live.contains(ens.get(m))) {
                            reader = live.indexOf(ens.get(m));
                        }
                    }
                    if (!stored) {
                        continue;
                    }
                    if (reader < 0) {
                        throw new IllegalStateException("ledger " + id + " entry " + e + ": no live replica");
                    }
                    copies.add(new long[] {id, e, reader, target, avg});
                }
            }
        }

        Semaphore window = new Semaphore((int) windowBytes);
        AtomicLong entries = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        AtomicLong retries = new AtomicLong();
        AtomicReference<String> error = new AtomicReference<>();
        // warm-up, not timed: the first copies open the connections to every bookie
        int warm = Math.min(copies.size(), Math.max(50, Math.min(500, copies.size() / 100)));
        long start = 0;
        long warmBytes = 0;
        for (int i = 0; i < copies.size(); i++) {
            if (i == warm || i == 0) {
                window.acquire((int) windowBytes);
                window.release((int) windowBytes);
                warmBytes = bytes.get();
                start = System.nanoTime();
            }
            long[] c = copies.get(i);
            final int permits = (int) Math.min(c[4], windowBytes);
            window.acquire(permits);
            if (error.get() != null) {
                window.release(permits);
                break;
            }
            new Relay(client, live.get((int) c[2]), live.get((int) c[3]), c[0], c[1], masterKey, v2, () -> {
                window.release(permits);
            }, entries, bytes, retries, error).start(3);
        }
        window.acquire((int) windowBytes);
        double seconds = (System.nanoTime() - start) / 1e9;
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("command", "copyceiling");
        out.put("ok", error.get() == null && entries.get() == copies.size());
        out.put("error", error.get());
        out.put("entries", entries.get());
        out.put("planned", copies.size());
        out.put("retries", retries.get());
        out.put("bytes", bytes.get());
        out.put("timed_bytes", bytes.get() - warmBytes);
        out.put("warmup_entries", warm == copies.size() ? 0 : warm);
        out.put("seconds", seconds);
        out.put("ledgers", ids.size());
        out.put("segments", segments);
        BkTool.print(out);
        return error.get() == null ? 0 : 1;
    }

    /** One entry's copy: read from {@code source}, write the stored bytes to {@code target}; a failed
     * read or write is tried again from the read, up to the attempts given to {@link #start}. */
    private static final class Relay {
        private final BookieClient client;
        private final BookieId source;
        private final BookieId target;
        private final long ledger;
        private final long entry;
        private final byte[] masterKey;
        private final boolean v2;
        private final Runnable done;
        private final AtomicLong entries;
        private final AtomicLong bytes;
        private final AtomicLong retries;
        private final AtomicReference<String> error;

        Relay(BookieClient client, BookieId source, BookieId target, long ledger, long entry, byte[] masterKey,
              boolean v2, Runnable done, AtomicLong entries, AtomicLong bytes, AtomicLong retries,
              AtomicReference<String> error) {
            this.client = client;
            this.source = source;
            this.target = target;
            this.ledger = ledger;
            this.entry = entry;
            this.masterKey = masterKey;
            this.v2 = v2;
            this.done = done;
            this.entries = entries;
            this.bytes = bytes;
            this.retries = retries;
            this.error = error;
        }

        private void failed(int attemptsLeft, String what) {
            if (attemptsLeft > 1) {
                retries.incrementAndGet();
                start(attemptsLeft - 1);
            } else {
                error.compareAndSet(null, what);
                done.run();
            }
        }

        void start(int attemptsLeft) {
            client.readEntry(source, ledger, entry, (rc, lid, eid, buf, ctx) -> {
                if (rc != BKException.Code.OK) {
                    failed(attemptsLeft, "read " + lid + "/" + eid + ": " + BKException.getMessage(rc));
                    return;
                }
                final int size = buf.readableBytes();
                ByteBufList toSend;
                if (v2) {  // the v2 client sends the frame as given: length, request header, master key, entry
                    ByteBuf head = Unpooled.buffer(8 + BookieProtocol.MASTER_KEY_LENGTH);
                    head.writeInt(4 + BookieProtocol.MASTER_KEY_LENGTH + size);
                    head.writeInt(BookieProtocol.PacketHeader.toInt(BookieProtocol.CURRENT_PROTOCOL_VERSION,
                            BookieProtocol.ADDENTRY, BookieProtocol.FLAG_RECOVERY_ADD));
                    head.writeBytes(masterKey, 0, BookieProtocol.MASTER_KEY_LENGTH);
                    toSend = ByteBufList.get(head, buf.retain());
                } else {
                    toSend = ByteBufList.get(buf.retain());
                }
                client.addEntry(target, lid, masterKey, eid, toSend, (wrc, wlid, weid, addr, wctx) -> {
                    if (wrc == BKException.Code.OK) {
                        entries.incrementAndGet();
                        bytes.addAndGet(size);
                        done.run();
                    } else {
                        failed(attemptsLeft, "write " + wlid + "/" + weid + " to " + addr + ": "
                                + BKException.getMessage(wrc));
                    }
                }, null, BookieProtocol.FLAG_RECOVERY_ADD, false, EnumSet.noneOf(WriteFlag.class));
                toSend.release();
            }, null, BookieProtocol.FLAG_NONE);
        }
    }
}
