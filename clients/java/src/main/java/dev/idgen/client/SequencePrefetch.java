package dev.idgen.client;

import dev.idgen.client.Frames.Values;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * Prefetch for named sequences ({@link IdgenClient.Builder#sequencePrefetch(int)}), as
 * clients/vectors/SEQUENCES.md says: per name, a sorted buffer of values of a dense sequence.
 *
 * <ul>
 *   <li>A name's first call (mode not known yet) asks for exactly its {@code n} and learns
 *       the mode from the VALUES answer; calls of the name made meanwhile wait for that answer
 *       (then take the dense path below, or ask for themselves). A strict sequence's calls
 *       always ask for exactly their {@code n}, side by side: its values are never kept.
 *   <li>A dense sequence's call is answered from the buffer when it holds {@code n} values
 *       (the smallest, so values leave in increasing order, each to one call). Otherwise the
 *       call queues and one fetch per name is in flight: {@code max(K, n)} values of the first
 *       caller queued (capped at the node's max_batch), merged with what the buffer holds;
 *       queued calls are then served in order, and the rest is kept. Holding at most one fetch
 *       in flight per name keeps a buffer within about {@code K} values (the gap a stopped
 *       client leaves), and every answer of the name is merged before the next request is
 *       sent, so the values a caller's successive calls get from one node increase even when
 *       completions run on different threads.
 *   <li>{@code UNKNOWN_SEQUENCE} empties a name's buffer and forgets its mode. A fetch above
 *       the call's own {@code n} answered {@code SEQUENCE_USED_UP} is asked again for exactly
 *       {@code n} (the sequence may have fewer than {@code K} values left), and the name is
 *       asked for exact counts from then on.
 *   <li>At most {@link #MAX_NAMES} names (least recently used forgotten; their values are a
 *       gap).
 * </ul>
 *
 * <p>One lock guards every name's state; completions run outside it. A caller waits at most
 * its own deadline; a fetch that fails for a reason other nodes would repeat ({@code
 * UNKNOWN_SEQUENCE}, {@code INVALID_SEQUENCE_NAME}, {@code SEQUENCE_USED_UP}, a node without
 * sequences, the client closed) fails every queued call; any other failure fails the caller
 * it was made for, and the next queued caller gets a fetch of its own, with its own deadline.
 */
final class SequencePrefetch {
    /** The most names with a buffer (a namespace holds at most 1024 sequences). */
    static final int MAX_NAMES = 1024;
    private static final long[] EMPTY = new long[0];

    private final IdgenClient client;
    private final int k;
    private final Object lock = new Object();
    private boolean closed; // guarded by lock
    private final LinkedHashMap<String, Entry> entries = new LinkedHashMap<>(64, 0.75f, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Entry> eldest) {
            return size() > MAX_NAMES;
        }
    };

    /** One name's state; guarded by {@link #lock}. */
    private static final class Entry {
        final String name;
        final byte[] nameBytes;
        SequenceMode mode; // null until an answer told it
        boolean exactOnly; // a fetch above the call's n was answered SEQUENCE_USED_UP
        long[] buf = EMPTY; // buf[head .. head + count) sorted, strictly increasing
        int head;
        int count;
        Waiter fetchingFor; // the caller the fetch in flight was made for, or null
        final ArrayDeque<Waiter> waiters = new ArrayDeque<>();

        Entry(String name, byte[] nameBytes) {
            this.name = name;
            this.nameBytes = nameBytes;
        }

        void clear() {
            buf = EMPTY;
            head = 0;
            count = 0;
        }

        long[] take(int n) {
            long[] out = Arrays.copyOfRange(buf, head, head + n);
            head += n;
            count -= n;
            if (count == 0) {
                clear();
            }
            return out;
        }

        /** Merges {@code values} (strictly increasing) into the buffer; a value held already is dropped. */
        void merge(long[] values) {
            long[] out = new long[count + values.length];
            int i = head;
            int end = head + count;
            int j = 0;
            int o = 0;
            while (i < end && j < values.length) {
                long a = buf[i];
                long b = values[j];
                if (a < b) {
                    out[o++] = a;
                    i++;
                } else if (b < a) {
                    out[o++] = b;
                    j++;
                } else {
                    out[o++] = a; // never hand out one value twice
                    i++;
                    j++;
                }
            }
            while (i < end) {
                out[o++] = buf[i++];
            }
            while (j < values.length) {
                out[o++] = values[j++];
            }
            buf = out;
            head = 0;
            count = o;
        }
    }

    /** A call waiting for a fetch. */
    private static final class Waiter {
        final int n;
        final long deadline; // System.nanoTime()
        final CompletableFuture<long[]> future = new CompletableFuture<>();

        Waiter(int n, long deadline) {
            this.n = n;
            this.deadline = deadline;
        }
    }

    /** What to do once the lock is released. */
    private static final class After {
        After(Entry entry) {
            this.entry = entry;
        }

        final List<Waiter> served = new ArrayList<>();
        final List<long[]> servedValues = new ArrayList<>();
        final List<Waiter> failed = new ArrayList<>();
        Throwable failure;
        final List<Waiter> redo = new ArrayList<>(); // callers of `entry` that ask again
        final Entry entry;
        Entry fetchEntry;
        Waiter fetchFor;
    }

    SequencePrefetch(IdgenClient client, int k) {
        this.client = client;
        this.k = k;
    }

    /** {@code n} values of sequence {@code name} (name and n already checked). */
    CompletableFuture<long[]> next(String name, byte[] nameBytes, int n, Duration deadline) {
        return next(name, nameBytes, n, System.nanoTime() + deadline.toNanos());
    }

    private CompletableFuture<long[]> next(String name, byte[] nameBytes, int n, long deadline) {
        if (deadline - System.nanoTime() <= 0) {
            return CompletableFuture.failedFuture(new DeadlineExceededException("the call's deadline ran out", null));
        }
        Waiter w;
        Entry e;
        boolean fetch = false;
        synchronized (lock) {
            if (closed) {
                return CompletableFuture.failedFuture(new ClientClosedException("the client is closed"));
            }
            e = entries.get(name);
            if (e == null) {
                e = new Entry(name, nameBytes);
                entries.put(name, e);
            }
            if (e.mode == SequenceMode.STRICT) {
                e = null; // exactly n, nothing kept
                w = null;
            } else if (e.mode == SequenceMode.DENSE && e.count >= n) {
                return CompletableFuture.completedFuture(e.take(n));
            } else {
                // Dense and short, or the mode not known yet: one request per name in flight
                // (for an unknown mode, of exactly n: it learns the mode), the others queued.
                w = new Waiter(n, deadline);
                e.waiters.addLast(w);
                if (e.fetchingFor == null) {
                    e.fetchingFor = w;
                    fetch = true;
                }
            }
        }
        if (e == null) {
            return strict(name, nameBytes, n, deadline);
        }
        if (fetch) {
            fetch(e, w);
        }
        scheduleTimeout(e, w);
        return w.future;
    }

    /**
     * One call of exactly {@code n} of a sequence known to be strict, unbuffered (calls of a
     * strict sequence run side by side); its answer may tell another mode.
     */
    private CompletableFuture<long[]> strict(String name, byte[] nameBytes, int n, long deadline) {
        CompletableFuture<long[]> out = new CompletableFuture<>();
        Duration left = Duration.ofNanos(deadline - System.nanoTime());
        if (left.isNegative() || left.isZero()) {
            out.completeExceptionally(new DeadlineExceededException("the call's deadline ran out", null));
            return out;
        }
        CompletableFuture<Values> f;
        try {
            f = client.valuesCall(nameBytes, n, n, left);
        } catch (RuntimeException ex) {
            f = CompletableFuture.failedFuture(ex);
        }
        f.whenComplete((v, err) -> {
            if (err == null) {
                out.complete(learn(name, nameBytes, v.mode(), v.values(), n));
            } else {
                Throwable cause = IdgenClient.unwrap(err);
                if (isStatus(cause, Status.UNKNOWN_SEQUENCE)) {
                    forget(name);
                }
                out.completeExceptionally(cause);
            }
        });
        return out;
    }

    /**
     * Records the mode an answer of exactly {@code n} told, and gives the call its values: for a
     * dense sequence (created again as dense) whose buffer holds values meanwhile, the {@code
     * n} smallest of both, the rest kept, so values still leave in increasing order.
     */
    private long[] learn(String name, byte[] nameBytes, SequenceMode mode, long[] values, int n) {
        synchronized (lock) {
            if (closed) {
                return values;
            }
            Entry e = entries.get(name);
            if (e == null) {
                e = new Entry(name, nameBytes);
                entries.put(name, e);
            }
            e.mode = mode;
            if (mode == SequenceMode.STRICT) {
                e.clear();
                return values;
            }
            if (e.count == 0 || values[values.length - 1] < e.buf[e.head]) {
                return values;
            }
            e.merge(values);
            return e.take(n);
        }
    }

    private void forget(String name) {
        synchronized (lock) {
            Entry e = entries.get(name);
            if (e != null) {
                e.clear();
                e.mode = null;
                e.exactOnly = false;
            }
        }
    }

    /** Asks for the values of {@code w} and the buffer (outside the lock). */
    private void fetch(Entry e, Waiter w) {
        int want;
        synchronized (lock) {
            // An unknown mode asks for exactly n: the first call never buffers.
            want = e.mode != SequenceMode.DENSE || e.exactOnly ? w.n : Math.max(k, w.n);
        }
        Duration left = Duration.ofNanos(Math.max(1, w.deadline - System.nanoTime()));
        CompletableFuture<Values> f;
        try {
            f = client.valuesCall(e.nameBytes, w.n, want, left);
        } catch (RuntimeException ex) {
            f = CompletableFuture.failedFuture(ex);
        }
        int asked = want;
        f.whenComplete((v, err) -> fetched(e, w, asked, v, err));
    }

    private void fetched(Entry e, Waiter w, int asked, Values v, Throwable err) {
        After a = new After(e);
        synchronized (lock) {
            e.fetchingFor = null;
            if (closed) {
                a.failed.addAll(e.waiters);
                e.waiters.clear();
                e.clear();
                a.failure = new ClientClosedException("the client is closed");
            } else if (err == null) {
                answered(e, w, v, a);
            } else {
                failedFetch(e, w, asked, IdgenClient.unwrap(err), a);
            }
        }
        finish(a);
    }

    /** Under the lock: a fetch's VALUES. */
    private void answered(Entry e, Waiter w, Values v, After a) {
        if (v.mode() == SequenceMode.STRICT) {
            // The sequence is strict (learnt now, or dropped and created again as strict):
            // nothing may be kept. The caller the request was made for began before it was sent,
            // so its values keep the order promise; any rest is dropped (a gap) and the callers
            // queued meanwhile ask for themselves.
            e.mode = SequenceMode.STRICT;
            e.clear();
            if (e.waiters.remove(w) && !w.future.isDone()) {
                a.served.add(w);
                a.servedValues.add(Arrays.copyOf(v.values(), w.n));
            }
            a.redo.addAll(e.waiters);
            e.waiters.clear();
            return;
        }
        e.mode = SequenceMode.DENSE;
        e.merge(v.values());
        while (!e.waiters.isEmpty()) {
            Waiter head = e.waiters.peekFirst();
            if (head.future.isDone()) {
                e.waiters.pollFirst(); // timed out meanwhile
                continue;
            }
            if (e.count < head.n) {
                break;
            }
            e.waiters.pollFirst();
            a.served.add(head);
            a.servedValues.add(e.take(head.n));
        }
        if (!e.waiters.isEmpty()) {
            if (entries.get(e.name) == e) {
                nextFetch(e, a);
            } else {
                // Forgotten meanwhile (least recently used): the others ask the name's new state.
                a.redo.addAll(e.waiters);
                e.waiters.clear();
            }
        }
        if (entries.get(e.name) != e) {
            e.clear(); // a forgotten name's values are a gap
        }
    }

    /** Under the lock: a fetch failed with {@code cause}. */
    private void failedFetch(Entry e, Waiter w, int asked, Throwable cause, After a) {
        if (isStatus(cause, Status.SEQUENCE_USED_UP) && asked > w.n && !e.exactOnly) {
            // Fewer than `asked` values left, maybe enough for the calls: ask exact counts.
            e.exactOnly = true;
            nextFetch(e, a);
            return;
        }
        if (finalForEveryCall(cause)) {
            if (isStatus(cause, Status.UNKNOWN_SEQUENCE)) {
                e.clear();
                e.mode = null;
                e.exactOnly = false;
            }
            a.failed.addAll(e.waiters);
            e.waiters.clear();
            a.failure = cause;
            return;
        }
        // This caller's failure (its deadline, the nodes it could reach): the next caller
        // queued gets a fetch of its own, within its own deadline.
        if (e.waiters.remove(w)) {
            a.failed.add(w);
            a.failure = cause;
        }
        nextFetch(e, a);
    }

    /** Under the lock: starts (after the lock) a fetch for the first queued caller still waiting. */
    private void nextFetch(Entry e, After a) {
        while (!e.waiters.isEmpty() && e.waiters.peekFirst().future.isDone()) {
            e.waiters.pollFirst();
        }
        Waiter head = e.waiters.peekFirst();
        if (head != null) {
            e.fetchingFor = head;
            a.fetchEntry = e;
            a.fetchFor = head;
        }
    }

    /** Outside the lock: completes, fails, re-asks and fetches what {@code a} says. */
    private void finish(After a) {
        for (int i = 0; i < a.served.size(); i++) {
            // A caller whose deadline fired just now loses these values: a gap, never a duplicate.
            a.served.get(i).future.complete(a.servedValues.get(i));
        }
        for (Waiter w : a.failed) {
            w.future.completeExceptionally(a.failure);
        }
        if (a.fetchFor != null) {
            fetch(a.fetchEntry, a.fetchFor);
        }
        for (Waiter w : a.redo) {
            if (w.future.isDone()) {
                continue;
            }
            // Asked again as a new call of the name (its current state), within the caller's
            // own deadline.
            next(a.entry.name, a.entry.nameBytes, w.n, w.deadline).whenComplete((v, err) -> {
                if (err == null) {
                    w.future.complete(v);
                } else {
                    w.future.completeExceptionally(IdgenClient.unwrap(err));
                }
            });
        }
    }

    private void scheduleTimeout(Entry e, Waiter w) {
        try {
            ScheduledFuture<?> timer = client.timers().schedule(() -> {
                if (w.future.completeExceptionally(new DeadlineExceededException(
                        "no values of sequence " + e.name + " within the call's deadline", null))) {
                    synchronized (lock) {
                        e.waiters.remove(w);
                    }
                }
            }, Math.max(1, w.deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            w.future.whenComplete((v, err) -> timer.cancel(false));
        } catch (RejectedExecutionException ex) {
            w.future.completeExceptionally(new ClientClosedException("the client is closed"));
        }
    }

    private static boolean isStatus(Throwable t, int status) {
        return t instanceof ServerException se && se.status() == status;
    }

    /** Errors every node would give every queued call of the name. */
    private static boolean finalForEveryCall(Throwable t) {
        return isStatus(t, Status.UNKNOWN_SEQUENCE) || isStatus(t, Status.INVALID_SEQUENCE_NAME)
                || isStatus(t, Status.SEQUENCE_USED_UP) || t instanceof SequencesUnsupportedException
                || t instanceof ClientClosedException;
    }

    /** Names with a state (buffer or mode); for tests. */
    int names() {
        synchronized (lock) {
            return entries.size();
        }
    }

    /** The mode learnt for {@code name}, or {@code null}; for tests. */
    SequenceMode mode(String name) {
        synchronized (lock) {
            Entry e = entries.get(name);
            return e == null ? null : e.mode;
        }
    }

    /** Values held for {@code name}; for tests. */
    int buffered(String name) {
        synchronized (lock) {
            Entry e = entries.get(name);
            return e == null ? 0 : e.count;
        }
    }

    void close() {
        List<Waiter> failed = new ArrayList<>();
        synchronized (lock) {
            closed = true;
            for (Entry e : entries.values()) {
                failed.addAll(e.waiters);
                e.waiters.clear();
                e.clear();
            }
            entries.clear();
        }
        for (Waiter w : failed) {
            w.future.completeExceptionally(new ClientClosedException("the client is closed"));
        }
    }
}
