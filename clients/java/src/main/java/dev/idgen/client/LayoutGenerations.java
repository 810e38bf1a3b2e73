package dev.idgen.client;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The layouts a cluster has used over its life, generation 0 first, each from its switch time
 * on (a node's admin {@code GET /layout} lists them as {@code "layouts"}; see
 * {@code clients/vectors/LAYOUTS.md}). Every ID of a later generation is greater than every ID
 * of an earlier one: an ID belongs to the generation with the largest first ID at or below it,
 * and is taken apart with that generation's layout.
 */
public final class LayoutGenerations {
    /**
     * One layout generation.
     *
     * @param generation its number (0 for the layout the cluster was created with)
     * @param firstId its smallest ID
     * @param switchUnixMs when it took over, {@code null} for generation 0
     * @param layout its layout
     */
    public record Generation(int generation, long firstId, Long switchUnixMs, Layout layout) {}

    /** A decoded ID: its generation's number and its fields under that generation's layout. */
    public record Decoded(int generation, Layout.Parts parts) {}

    private final List<Generation> generations;

    /**
     * Checks {@code generations} against LAYOUTS.md's rules: generation 0 first (first ID 0, no
     * switch), consecutive numbers, one ID width, each first ID the one its switch gives,
     * switches increasing, an epoch early enough that IDs keep increasing.
     *
     * @throws IllegalArgumentException saying which rule a list breaks
     */
    public LayoutGenerations(List<Generation> generations) {
        Objects.requireNonNull(generations, "generations");
        if (generations.isEmpty()) {
            throw new IllegalArgumentException("no layout generations");
        }
        for (int i = 0; i < generations.size(); i++) {
            Generation g = generations.get(i);
            Layout l = g.layout();
            if (Math.min(l.timestampBits(), Math.min(l.workerBits(), l.sequenceBits())) < 1 || l.idBits() > 63
                    || l.idBits() < 32 || l.regionBits() > l.workerBits() || l.regionBits() < 0) {
                throw new IllegalArgumentException("layout generation " + i + " is not a valid layout");
            }
            if (g.generation() != i) {
                throw new IllegalArgumentException("layout generation " + g.generation() + " listed as number " + i);
            }
            if (i == 0) {
                if (g.firstId() != 0 || g.switchUnixMs() != null) {
                    throw new IllegalArgumentException("layout generation 0 has first_id 0 and no switch");
                }
                continue;
            }
            Generation prev = generations.get(i - 1);
            if (l.idBits() != prev.layout().idBits()) {
                throw new IllegalArgumentException("layout generation " + i + " changes the ID width");
            }
            Long s = g.switchUnixMs();
            if (s == null || (prev.switchUnixMs() != null && s <= prev.switchUnixMs())) {
                throw new IllegalArgumentException("layout generation " + i + " needs a switch after the one before");
            }
            long want = (s - prev.layout().epochMs()) << (prev.layout().workerBits() + prev.layout().sequenceBits());
            if (s < prev.layout().epochMs() || g.firstId() != want) {
                throw new IllegalArgumentException(
                        "layout generation " + i + ": first_id " + g.firstId() + ", its switch gives " + want);
            }
            long ts = s - l.epochMs();
            if (ts < 0 || (ts << (l.workerBits() + l.sequenceBits())) < g.firstId()) {
                throw new IllegalArgumentException(
                        "layout generation " + i + ": its epoch is too late for IDs to keep increasing");
            }
        }
        this.generations = List.copyOf(generations);
    }

    /**
     * From a node's {@code GET /layout} answer parsed with any JSON library into maps and lists
     * (numbers as {@link Number}, {@code first_id_str} preferred over {@code first_id}): the
     * answer's {@code "layouts"} list, or the whole answer.
     *
     * @throws IllegalArgumentException for a missing field or a list that breaks the rules
     */
    public static LayoutGenerations fromJson(Object parsed) {
        Object list = parsed instanceof Map<?, ?> m ? m.get("layouts") : parsed;
        if (!(list instanceof List<?> items)) {
            throw new IllegalArgumentException("expected GET /layout's body or its \"layouts\" list");
        }
        List<Generation> gens = new ArrayList<>();
        for (Object item : items) {
            if (!(item instanceof Map<?, ?> o)) {
                throw new IllegalArgumentException("a layout generation is an object");
            }
            long firstId = o.get("first_id_str") instanceof String t ? Long.parseLong(t) : number(o, "first_id");
            Object sw = o.get("switch_unix_ms");
            Long switchUnixMs = sw == null ? null : number(o, "switch_unix_ms");
            Layout layout = new Layout(number(o, "epoch_ms"), (int) number(o, "timestamp_bits"),
                    (int) number(o, "worker_bits"), (int) number(o, "sequence_bits"), (int) number(o, "region_bits"));
            gens.add(new Generation((int) number(o, "layout_generation"), firstId, switchUnixMs, layout));
        }
        return new LayoutGenerations(gens);
    }

    private static long number(Map<?, ?> o, String key) {
        if (o.get(key) instanceof Number n && n.longValue() >= 0) {
            return n.longValue();
        }
        throw new IllegalArgumentException("a layout generation without a non-negative integer \"" + key + "\"");
    }

    /** Every generation, generation 0 first. */
    public List<Generation> generations() {
        return generations;
    }

    /**
     * The generation {@code id} belongs to.
     *
     * @throws IllegalArgumentException for a value outside {@code 0 .. 2^W}
     */
    public Generation generationOf(long id) {
        Layout first = generations.get(0).layout();
        if (id < 0 || id > first.maxId()) {
            throw new IllegalArgumentException(Long.toUnsignedString(id) + " is not an ID of this cluster: its IDs are "
                    + first.idBits() + " bits wide");
        }
        for (int i = generations.size() - 1; i >= 0; i--) {
            if (generations.get(i).firstId() <= id) {
                return generations.get(i);
            }
        }
        return generations.get(0);
    }

    /** {@code id}'s generation number and its fields under that generation's layout. */
    public Decoded decode(long id) {
        Generation g = generationOf(id);
        return new Decoded(g.generation(), g.layout().decode(id));
    }
}
