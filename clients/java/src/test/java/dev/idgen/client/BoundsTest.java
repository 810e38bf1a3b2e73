package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * Time bounds for range queries: every case of clients/vectors/bounds.json, and the bounds
 * recomputed by a search over IDs with {@link Layout#decode} on random layouts.
 */
class BoundsTest {
    private static final Map<String, TimeBoundsException.Kind> KINDS = Map.of(
            "before_epoch", TimeBoundsException.Kind.BEFORE_EPOCH,
            "after_last", TimeBoundsException.Kind.AFTER_LAST,
            "empty", TimeBoundsException.Kind.EMPTY);

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> list(Object o) {
        return (List<Map<String, Object>>) o;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> map(Object o) {
        return (Map<String, Object>) o;
    }

    private static long num(Object o) {
        return Long.parseLong((String) o);
    }

    private static int width(Object o) {
        return ((Number) o).intValue();
    }

    @Test
    void everyBoundsVectorHolds() throws Exception {
        List<Map<String, Object>> layouts = list(map(Support.json("clients/vectors/bounds.json")).get("layouts"));
        assertTrue(layouts.size() >= 5);
        int answers = 0;
        int errors = 0;
        for (Map<String, Object> lv : layouts) {
            Map<String, Object> l = map(lv.get("layout"));
            Layout layout = new Layout(num(l.get("epoch_ms")), width(l.get("timestamp_bits")),
                    width(l.get("worker_bits")), width(l.get("sequence_bits")), width(l.get("region_bits")));
            String name = (String) lv.get("name");
            assertEquals(num(lv.get("last_unix_ms")), layout.lastUnixMs(), name);
            for (Map<String, Object> c : list(lv.get("at"))) {
                long t = num(c.get("unix_ms"));
                if (c.containsKey("error")) {
                    TimeBoundsException.Kind kind = KINDS.get((String) c.get("error"));
                    assertEquals(kind, assertThrows(TimeBoundsException.class, () -> layout.minIdAt(t), name + c).kind());
                    assertEquals(kind, assertThrows(TimeBoundsException.class, () -> layout.maxIdAt(t), name + c).kind());
                    errors++;
                } else {
                    assertEquals(num(c.get("min")), layout.minIdAt(t), name + c);
                    assertEquals(num(c.get("max")), layout.maxIdAt(t), name + c);
                    answers++;
                }
            }
            for (Map<String, Object> c : list(lv.get("bounds"))) {
                long from = num(c.get("from_ms"));
                long to = num(c.get("to_ms"));
                if (c.containsKey("error")) {
                    TimeBoundsException e = assertThrows(TimeBoundsException.class, () -> layout.bounds(from, to), name + c);
                    assertEquals(KINDS.get((String) c.get("error")), e.kind(), name + c);
                    assertTrue(e.getMessage().contains("ms"), e.getMessage());
                    errors++;
                } else {
                    Layout.Bounds b = layout.bounds(from, to);
                    assertEquals(num(c.get("lo")), b.lo(), name + c);
                    assertEquals(num(c.get("hi")), b.hi(), name + c);
                    assertEquals(num(c.get("last")), b.last(), name + c);
                    answers++;
                }
            }
        }
        assertTrue(answers >= 20 && errors >= 20, answers + " answers, " + errors + " errors");
    }

    /** The 53-bit layouts of the vectors: their last ID is 2^53 - 1, exact as a double; a value at
     * or above 2^53 is not one of their IDs. */
    @Test
    void javaScriptSafeLayouts() throws Exception {
        List<Map<String, Object>> layouts = list(map(Support.json("clients/vectors/bounds.json")).get("layouts"));
        int seen = 0;
        for (Map<String, Object> lv : layouts) {
            Map<String, Object> l = map(lv.get("layout"));
            Layout layout = new Layout(num(l.get("epoch_ms")), width(l.get("timestamp_bits")),
                    width(l.get("worker_bits")), width(l.get("sequence_bits")), width(l.get("region_bits")));
            String name = (String) lv.get("name");
            assertEquals(layout.maxId(), layout.maxIdAt(layout.lastUnixMs()), name);
            assertEquals(layout.lastUnixMs(), layout.decode(layout.maxId()).unixMs(), name);
            if (layout.idBits() < 63) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> layout.decode(layout.maxId() + 1), name);
                assertTrue(e.getMessage().contains("not an ID of this layout"), e.getMessage());
            }
            if (layout.idBits() != 53) {
                continue;
            }
            seen++;
            assertTrue(layout.jsSafe(), name);
            assertEquals((1L << 53) - 1, layout.maxId(), name);
            assertEquals(layout.maxId(), (long) (double) layout.maxId(), name);
        }
        assertTrue(seen >= 2, seen + " JavaScript-safe layouts");
        assertTrue(!new Layout(0, 41, 10, 12, 0).jsSafe());
    }

    /** The smallest ID whose time is at or after {@code unixMs}: bisection with decode, in BigInteger. */
    private static long firstIdAtOrAfter(Layout layout, long unixMs) {
        BigInteger lo = BigInteger.ZERO;
        BigInteger hi = BigInteger.ONE.shiftLeft(layout.idBits());
        for (int i = 0; i < 64 && lo.compareTo(hi) < 0; i++) {
            BigInteger mid = lo.add(hi).shiftRight(1);
            if (layout.decode(mid.longValueExact()).unixMs() >= unixMs) {
                hi = mid;
            } else {
                lo = mid.add(BigInteger.ONE);
            }
        }
        return lo.longValueExact();
    }

    @Test
    void randomLayoutsAgreeWithASearchOverIds() {
        Random rng = new Random(30);
        for (int i = 0; i < 300; i++) {
            int tb = 1 + rng.nextInt(40);
            // Any width from 32 (or tb + 2) to 63 bits.
            int widthBits = Math.max(tb + 2, 63 - rng.nextInt(32));
            int wb = 1 + rng.nextInt(widthBits - 1 - tb);
            int sb = widthBits - tb - wb;
            Layout layout = new Layout(rng.nextLong(1L << 44), tb, wb, sb, rng.nextInt(wb + 1));
            long span = layout.lastUnixMs() - layout.epochMs();
            long a = rng.nextLong(span + 1);
            long b = rng.nextLong(span + 1);
            if (a == b) {
                continue;
            }
            long from = layout.epochMs() + Math.min(a, b);
            long to = layout.epochMs() + Math.max(a, b);
            Layout.Bounds bounds = layout.bounds(from, to);
            String what = layout + " [" + from + ", " + to + ")";
            assertEquals(firstIdAtOrAfter(layout, from), bounds.lo(), what);
            assertEquals(firstIdAtOrAfter(layout, to), bounds.hi(), what);
            assertEquals(layout.maxIdAt(to - 1), bounds.last(), what);
            for (long when : new long[] {from, to - 1, from - 1, to}) {
                if (when < layout.epochMs() || when > layout.lastUnixMs()) {
                    continue;
                }
                long w = rng.nextLong() & ((1L << wb) - 1);
                long s = rng.nextLong() & ((1L << sb) - 1);
                long id = ((when - layout.epochMs()) << (wb + sb)) | (w << sb) | s;
                boolean inside = bounds.lo() <= id && id < bounds.hi();
                assertEquals(from <= when && when < to, inside, what + " ID " + id);
            }
        }
    }
}
