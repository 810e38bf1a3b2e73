package dev.idgen.client;

/**
 * A request with an idempotency key failed on its node in a way that another node could have
 * served (unreachable, 3xx "retry elsewhere", ...). The client does not retry it on another
 * node: that node does not know the key and would issue new IDs. Retry it later with the same
 * key (it goes to the same node), or give up the key. {@link #getCause()} is the node's error.
 */
public class KeyedRequestFailedException extends IdgenException {
    private static final long serialVersionUID = 1L;

    public KeyedRequestFailedException(String node, Throwable cause) {
        super("a request with an idempotency key goes to one node (picked by the key's hash) and is not"
                + " retried on another node, which would issue new IDs: " + cause.getMessage(), node, cause);
    }
}
