package dev.idgen.client;

/**
 * A time or interval without IDs in a layout ({@link Layout#bounds}, {@link Layout#minIdAt},
 * {@link Layout#maxIdAt}; clients/vectors/BOUNDS.md): {@link #kind()} says which.
 */
public class TimeBoundsException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    /** Why the time or interval has no IDs. */
    public enum Kind {
        /** A time before the layout's epoch (a negative one included). */
        BEFORE_EPOCH,
        /** A time after the layout's last millisecond. */
        AFTER_LAST,
        /** An interval {@code [from, to)} with {@code to <= from}. */
        EMPTY
    }

    private final Kind kind;

    public TimeBoundsException(Kind kind, String message) {
        super(message);
        this.kind = kind;
    }

    /** Why. */
    public Kind kind() {
        return kind;
    }
}
