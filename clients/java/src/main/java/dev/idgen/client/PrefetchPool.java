package dev.idgen.client;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The local pool behind {@link IdgenClient#nextId()} with prefetch: a ring of IDs under one
 * lock, so each ID leaves it once, and at most one refill in flight. Callers that find it
 * empty queue up and are served, in order, by the next refill; a refill that fails fails the
 * callers waiting for it.
 */
final class PrefetchPool {
    private final IdgenClient client;
    private final int size;
    private final int lowWater;
    private final Object lock = new Object();
    private long[] ring;
    private int head;
    private int count;
    private boolean refilling;
    private boolean closed;
    private final ArrayDeque<CompletableFuture<Long>> waiters = new ArrayDeque<>();

    PrefetchPool(IdgenClient client, int size, int lowWater) {
        this.client = client;
        this.size = size;
        this.lowWater = lowWater;
        this.ring = new long[size];
    }

    CompletableFuture<Long> next(Duration deadline) {
        CompletableFuture<Long> w;
        int want;
        synchronized (lock) {
            if (closed) {
                return CompletableFuture.failedFuture(new ClientClosedException("the client is closed"));
            }
            if (count > 0 && waiters.isEmpty()) {
                long id = ring[head];
                head = (head + 1) % ring.length;
                count--;
                client.stats.prefetchServed.increment();
                want = refillWanted();
                if (want == 0) {
                    return CompletableFuture.completedFuture(id);
                }
                w = CompletableFuture.completedFuture(id);
            } else {
                w = new CompletableFuture<>();
                waiters.addLast(w);
                want = refillWanted();
            }
        }
        startRefill(want);
        if (w.isDone()) {
            return w;
        }
        try {
            client.timers().schedule(() -> {
                if (w.completeExceptionally(new DeadlineExceededException(
                        "no ID from the prefetch pool within " + deadline.toMillis() + " ms", null))) {
                    synchronized (lock) {
                        waiters.remove(w);
                    }
                }
            }, deadline.toNanos(), TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            w.completeExceptionally(new ClientClosedException("the client is closed"));
        }
        return w;
    }

    /**
     * Under the lock: how many IDs to refill with when the pool is low and no refill is in
     * flight (then marked in flight; the caller starts it after the lock), else 0.
     */
    private int refillWanted() {
        if (refilling || closed || (count >= lowWater && waiters.isEmpty())) {
            return 0;
        }
        int want = (int) Math.min(1 << 24, (long) size - count + waiters.size());
        if (want <= 0) {
            return 0;
        }
        refilling = true;
        return want;
    }

    /** Outside the lock: asks for {@code want} IDs (nothing for 0). */
    private void startRefill(int want) {
        if (want == 0) {
            return;
        }
        CompletableFuture<long[]> f;
        try {
            f = client.nextIdsAsync(want, client.callDeadline());
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete(this::refilled);
    }

    private void refilled(long[] ids, Throwable error) {
        List<CompletableFuture<Long>> served = new ArrayList<>();
        List<Long> servedIds = new ArrayList<>();
        List<CompletableFuture<Long>> failed = new ArrayList<>();
        int want = 0;
        synchronized (lock) {
            refilling = false;
            if (closed) {
                return;
            }
            if (error != null) {
                failed.addAll(waiters);
                waiters.clear();
            } else {
                client.stats.prefetchRefills.increment();
                int k = 0;
                while (k < ids.length && !waiters.isEmpty()) {
                    CompletableFuture<Long> w = waiters.pollFirst();
                    if (w.isDone()) {
                        continue; // timed out meanwhile
                    }
                    served.add(w);
                    servedIds.add(ids[k++]);
                }
                int rest = ids.length - k;
                if (count + rest > ring.length) {
                    long[] bigger = new long[count + rest];
                    for (int i = 0; i < count; i++) {
                        bigger[i] = ring[(head + i) % ring.length];
                    }
                    ring = bigger;
                    head = 0;
                }
                for (int i = 0; i < rest; i++) {
                    ring[(head + count) % ring.length] = ids[k + i];
                    count++;
                }
                want = refillWanted();
            }
        }
        startRefill(want);
        Throwable cause = error == null ? null : IdgenClient.unwrap(error);
        for (CompletableFuture<Long> w : failed) {
            w.completeExceptionally(cause);
        }
        for (int i = 0; i < served.size(); i++) {
            // A waiter that timed out just now loses its ID: a gap, never a duplicate.
            if (served.get(i).complete(servedIds.get(i))) {
                client.stats.prefetchServed.increment();
            }
        }
    }

    void close() {
        List<CompletableFuture<Long>> failed;
        synchronized (lock) {
            closed = true;
            count = 0;
            failed = new ArrayList<>(waiters);
            waiters.clear();
        }
        for (CompletableFuture<Long> w : failed) {
            w.completeExceptionally(new ClientClosedException("the client is closed"));
        }
    }
}
