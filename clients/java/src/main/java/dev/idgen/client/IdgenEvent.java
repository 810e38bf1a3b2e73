package dev.idgen.client;

import java.util.Map;

/**
 * One event of a client (clients/vectors/CONFIG.md, "Observability"): its {@link #name()} and
 * its fields, in this order:
 *
 * <table>
 * <caption>events</caption>
 * <tr><th>name</th><th>fields</th><th>log level</th></tr>
 * <tr><td>{@code connect}</td><td>node, address, version, duration</td><td>DEBUG</td></tr>
 * <tr><td>{@code connect_failed}</td><td>node, error, duration</td><td>WARNING</td></tr>
 * <tr><td>{@code request}</td><td>op ({@code ids}, {@code values}, {@code uuids}, {@code ids_with},
 *     {@code masked_ids}, {@code ping}), count, node (the one that answered, or null), duration,
 *     outcome ({@code ok}, a status name, or the exception's class name)</td><td>DEBUG</td></tr>
 * <tr><td>{@code refused}</td><td>node, op, status (the number), status_name, message</td><td>INFO</td></tr>
 * <tr><td>{@code failover}</td><td>from, to, reason</td><td>WARNING</td></tr>
 * <tr><td>{@code node_down}</td><td>node, reason</td><td>WARNING</td></tr>
 * <tr><td>{@code node_up}</td><td>node, reason</td><td>INFO</td></tr>
 * </table>
 *
 * Nodes are {@code host:port} strings as configured (an expanded name's nodes: {@code ip:port}),
 * durations {@link java.time.Duration}s, status and count {@link Integer}s, the rest strings.
 *
 * @param name the event's name
 * @param fields its fields (read-only, in the order above)
 */
public record IdgenEvent(String name, Map<String, Object> fields) {
    /** A field's value, or {@code null}. */
    public Object get(String field) {
        return fields.get(field);
    }

    @Override
    public String toString() {
        StringBuilder b = new StringBuilder(name);
        fields.forEach((k, v) -> b.append(' ').append(k).append('=').append(v));
        return b.toString();
    }
}
