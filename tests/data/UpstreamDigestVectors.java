// Prints tests/data/upstream_digest_vectors.json from Apache BookKeeper's own DigestManager.
//
// Regenerate (bookkeeper-server 4.17.2 and its dependencies in LIB):
//   javac -d /tmp/dv -cp "$LIB/*" tests/data/UpstreamDigestVectors.java
//   java -cp "/tmp/dv:$LIB/*" UpstreamDigestVectors > tests/data/upstream_digest_vectors.json
//
// Payloads are generated, not stored: byte i of a payload is (i * 31 + seed) & 0xff. For large
// payloads only the packed prefix (header + digest) and the SHA-256 of the whole packed body are kept.
import io.netty.buffer.ByteBuf;
import io.netty.buffer.ByteBufAllocator;
import io.netty.buffer.Unpooled;
import io.netty.util.ReferenceCounted;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import org.apache.bookkeeper.proto.DataFormats.LedgerMetadataFormat.DigestType;
import org.apache.bookkeeper.proto.checksum.DigestManager;
import org.apache.bookkeeper.util.ByteBufList;

public class UpstreamDigestVectors {
    static final int INLINE_MAX = 64;

    static byte[] payload(int size, int seed) {
        byte[] b = new byte[size];
        for (int i = 0; i < size; i++) {
            b[i] = (byte) ((i * 31 + seed) & 0xff);
        }
        return b;
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }

    static byte[] toBytes(ReferenceCounted rc) {
        byte[] out;
        if (rc instanceof ByteBufList) {
            out = ((ByteBufList) rc).toArray();
        } else {
            ByteBuf b = (ByteBuf) rc;
            out = new byte[b.readableBytes()];
            b.getBytes(b.readerIndex(), out);
        }
        rc.release();
        return out;
    }

    static byte[] sha256(byte[] b) throws Exception {
        return MessageDigest.getInstance("SHA-256").digest(b);
    }

    public static void main(String[] args) throws Exception {
        byte[][] passwords = {
            new byte[0],
            "password".getBytes(StandardCharsets.UTF_8),
            {0x00, (byte) 0xff, 0x10, (byte) 0x80, 0x7f},
        };
        // ledgerId, entryId, lac, length, payload size, payload seed
        long[][] cases = {
            {1L, 0L, -1L, 0L, 0, 0},
            {12345L, 7L, 6L, 1024L, 11, 3},
            {Long.MAX_VALUE, 3L, 2L, 123456789012L, 1000, 200},
            {0L, 1L, 0L, 5L, 1, 255},
            {987654321L, 42L, 41L, 4302L, 102400, 17},
        };
        DigestType[] types = {DigestType.CRC32, DigestType.HMAC, DigestType.CRC32C, DigestType.DUMMY};
        ByteBufAllocator alloc = ByteBufAllocator.DEFAULT;

        List<String> keys = new ArrayList<>();
        for (byte[] pw : passwords) {
            keys.add(String.format("    {\"password\": \"%s\", \"master_key\": \"%s\"}",
                    hex(pw), hex(DigestManager.generateMasterKey(pw))));
        }

        List<String> entries = new ArrayList<>();
        List<String> lacs = new ArrayList<>();
        for (DigestType t : types) {
            for (byte[] pw : passwords) {
                if (t != DigestType.HMAC && pw.length > 0 && pw != passwords[1]) {
                    continue; // the password only matters for HMAC
                }
                for (long[] c : cases) {
                    long lid = c[0];
                    DigestManager dm = DigestManager.instantiate(lid, pw, t, alloc, false);
                    byte[] data = payload((int) c[4], (int) c[5]);
                    byte[] packed = toBytes(dm.computeDigestAndPackageForSending(
                            c[1], c[2], c[3], Unpooled.wrappedBuffer(data), new byte[20], 0));
                    // Upstream must accept its own body (also proves our reading of the layout).
                    ByteBuf back = dm.verifyDigestAndReturnData(c[1], Unpooled.wrappedBuffer(packed));
                    if (back.readableBytes() != data.length) {
                        throw new AssertionError("payload length changed");
                    }
                    int prefix = packed.length - data.length;
                    String body = data.length <= INLINE_MAX
                            ? String.format("\"packed\": \"%s\"", hex(packed))
                            : String.format("\"packed_prefix\": \"%s\", \"packed_sha256\": \"%s\"",
                                    hex(java.util.Arrays.copyOf(packed, prefix)), hex(sha256(packed)));
                    entries.add(String.format("    {\"digest_type\": \"%s\", \"password\": \"%s\", "
                            + "\"ledger_id\": %d, \"entry_id\": %d, \"lac\": %d, \"length\": %d, "
                            + "\"payload_size\": %d, \"payload_seed\": %d, \"mac_length\": %d, %s}",
                            t.name(), hex(pw), lid, c[1], c[2], c[3], c[4], c[5], prefix - 32, body));
                }
                for (long[] lc : new long[][] {{1L, -1L}, {Long.MAX_VALUE, 123456789L}}) {
                    DigestManager dm = DigestManager.instantiate(lc[0], pw, t, alloc, false);
                    byte[] packed = toBytes(dm.computeDigestAndPackageForSendingLac(lc[1]));
                    if (dm.verifyDigestAndReturnLac(Unpooled.wrappedBuffer(packed)) != lc[1]) {
                        throw new AssertionError("lac changed");
                    }
                    lacs.add(String.format("    {\"digest_type\": \"%s\", \"password\": \"%s\", "
                            + "\"ledger_id\": %d, \"lac\": %d, \"packed\": \"%s\"}",
                            t.name(), hex(pw), lc[0], lc[1], hex(packed)));
                }
            }
        }
        StringBuilder out = new StringBuilder();
        out.append("{\n");
        out.append("  \"produced_by\": \"tests/data/UpstreamDigestVectors.java run against Apache BookKeeper "
                + "bookkeeper-server 4.17.2 (Maven Central jars): DigestManager.instantiate(ledgerId, passwd, "
                + "type, ByteBufAllocator.DEFAULT, useV2Protocol=false).computeDigestAndPackageForSending / "
                + "computeDigestAndPackageForSendingLac (ByteBufList concatenated), each verified back with "
                + "verifyDigestAndReturnData / verifyDigestAndReturnLac; master keys from "
                + "DigestManager.generateMasterKey\",\n");
        out.append("  \"java_version\": \"" + System.getProperty("java.version") + "\",\n");
        out.append("  \"payload_rule\": \"byte i of a payload is (i * 31 + payload_seed) & 0xff; passwords are hex\",\n");
        out.append("  \"master_keys\": [\n" + String.join(",\n", keys) + "\n  ],\n");
        out.append("  \"entries\": [\n" + String.join(",\n", entries) + "\n  ],\n");
        out.append("  \"lac_bodies\": [\n" + String.join(",\n", lacs) + "\n  ]\n");
        out.append("}\n");
        System.out.print(out);
    }
}
