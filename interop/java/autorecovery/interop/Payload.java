package autorecovery.interop;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The deterministic entry payload shared by the writer, the reader and the Python side
 * (autorecovery.testing.upstream_java.expected_payload).
 *
 * <p>Entry {@code e} of ledger {@code l} with size {@code s} bytes is the ASCII prefix
 * {@code "L<l>E<e>:"} (cut to {@code s} bytes when longer), then byte {@code i} (for every
 * {@code i} past the prefix) is {@code 'a' + (i + l + e) mod 26}.
 */
final class Payload {
    private static final int ALPHABET = 26;
    private final int size;
    /** pattern[j] = 'a' + j mod 26, long enough to copy any window of {@code size} bytes. */
    private final byte[] pattern;

    Payload(int size) {
        this.size = size;
        this.pattern = new byte[size + ALPHABET];
        for (int j = 0; j < pattern.length; j++) {
            pattern[j] = (byte) ('a' + j % ALPHABET);
        }
    }

    /** A fresh array (the client keeps a reference until the add completes). */
    byte[] entry(long ledgerId, long entryId) {
        byte[] out = new byte[size];
        byte[] prefix = ("L" + ledgerId + "E" + entryId + ":").getBytes(StandardCharsets.US_ASCII);
        int p = Math.min(prefix.length, size);
        System.arraycopy(prefix, 0, out, 0, p);
        int base = (int) ((ledgerId % ALPHABET + entryId % ALPHABET) % ALPHABET);
        System.arraycopy(pattern, p + base, out, p, size - p);
        return out;
    }

    int size() {
        return size;
    }

    /** True when {@code data} is exactly what {@link #entry} gives for that ledger and entry. */
    boolean matches(byte[] data, long ledgerId, long entryId) {
        return data.length == size && Arrays.equals(data, entry(ledgerId, entryId));
    }
}
