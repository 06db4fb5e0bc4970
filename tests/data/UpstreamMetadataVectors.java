// Prints tests/data/upstream_metadata_vectors.json from Apache BookKeeper 4.17's own metadata writer.
//
// Regenerate (bookkeeper-server 4.17.2 and its dependencies, protobuf-java 3.25.5 among them, in LIB):
//   javac -d /tmp/mv -cp "$LIB/*" tests/data/UpstreamMetadataVectors.java
//   java -cp "/tmp/mv:$LIB/*" UpstreamMetadataVectors > tests/data/upstream_metadata_vectors.json
//
// - "escapes": protobuf-java's TextFormat.escapeBytes of each single byte 0..255 (what upstream's v2
//   writer, TextFormat.printer(), writes inside a quoted bytes or string value).
// - "metadata": LedgerMetadataSerDe.serialize of ledgers whose custom metadata was given in a
//   LinkedHashMap (upstream's builder keeps the caller's order: ImmutableMap.copyOf), keys not sorted,
//   one value holding every byte 0..255, for format versions 2 and 3.
// - "rewrite": what upstream's own rewrite writes for each: parseConfig, then LedgerMetadataBuilder.from
//   with ensemble member 0 of segment 0 replaced (the ReplicationWorker's change), then serialize.
import com.google.protobuf.ByteString;
import com.google.protobuf.TextFormat;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.bookkeeper.client.LedgerMetadataBuilder;
import org.apache.bookkeeper.client.api.DigestType;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.meta.LedgerMetadataSerDe;
import org.apache.bookkeeper.net.BookieId;

public class UpstreamMetadataVectors {
    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }

    static String json(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }

    static List<BookieId> ensemble(String... ids) {
        List<BookieId> out = new ArrayList<>();
        for (String id : ids) {
            out.add(BookieId.parse(id));
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        StringBuilder out = new StringBuilder("{\n");
        out.append("  \"produced_by\": \"tests/data/UpstreamMetadataVectors.java against bookkeeper-server 4.17.2, protobuf-java 3.25.5\",\n");
        out.append("  \"escapes\": [");
        for (int b = 0; b < 256; b++) {
            String esc = TextFormat.escapeBytes(ByteString.copyFrom(new byte[] {(byte) b}));
            out.append(b == 0 ? "" : ", ").append(json(esc));
        }
        out.append("],\n");

        byte[] all = new byte[256];
        for (int i = 0; i < 256; i++) {
            all[i] = (byte) i;
        }
        Map<String, byte[]> custom = new LinkedHashMap<>();
        custom.put("zeta", "last-by-name".getBytes("UTF-8"));
        custom.put("every-byte", all);
        custom.put("alpha", new byte[0]);
        custom.put("M\u00e9tadonn\u00e9e \u2603", new byte[] {7, 11, 0, (byte) 0xff});
        custom.put("beta", "\u0007\u000b\\\"'".getBytes("UTF-8"));

        LedgerMetadataSerDe serDe = new LedgerMetadataSerDe();
        out.append("  \"metadata\": {");
        StringBuilder rewrites = new StringBuilder("  \"rewrite\": {");
        int[] versions = {2, 3};
        for (int i = 0; i < versions.length; i++) {
            int v = versions[i];
            LedgerMetadata md = LedgerMetadataBuilder.create()
                .withId(59).withMetadataFormatVersion(v)
                .withEnsembleSize(3).withWriteQuorumSize(2).withAckQuorumSize(2)
                .withDigestType(DigestType.CRC32C).withPassword("pw\u0007\u000b".getBytes("UTF-8"))
                .newEnsembleEntry(0, ensemble("192.0.2.1:3181", "192.0.2.2:3181", "192.0.2.3:3181"))
                .newEnsembleEntry(10, ensemble("192.0.2.1:3181", "192.0.2.4:3181", "192.0.2.3:3181"))
                .withClosedState().withLastEntryId(19).withLength(2000)
                .withCreationTime(1544002383075L).storingCreationTime(true)
                .withCustomMetadata(custom)
                .build();
            byte[] bytes = serDe.serialize(md);
            out.append(i == 0 ? "" : ", ").append("\"v").append(v).append("\": \"").append(hex(bytes)).append('"');
            LedgerMetadata read = serDe.parseConfig(bytes, 59, Optional.empty());
            LedgerMetadata changed = LedgerMetadataBuilder.from(read)
                .replaceEnsembleEntry(0, ensemble("192.0.2.9:3181", "192.0.2.2:3181", "192.0.2.3:3181")).build();
            rewrites.append(i == 0 ? "" : ", ").append("\"v").append(v).append("\": \"")
                .append(hex(serDe.serialize(changed))).append('"');
        }
        out.append("},\n").append(rewrites).append("}\n}\n");
        System.out.print(out);
    }
}
