package dev.idgen.client;

import java.nio.file.Path;
import java.time.Duration;

/**
 * The client side of {@link ConnectTest}, run in its own JVM under clients/with-debian-hosts.sh:
 * {@code ConnectProbe CA_FILE (plain=HOST:PORT | tls=HOST:PORT)...}. Gets IDs from each node
 * and prints {@code connected: N}; exits 1 at the first failure, saying which.
 */
final class ConnectProbe {
    private ConnectProbe() {}

    public static void main(String[] args) {
        TlsConfig tls = TlsConfig.builder().caFile(Path.of(args[0])).build();
        int connected = 0;
        for (int i = 1; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            IdgenClient.Builder b = IdgenClient.builder().nodes(kv[1]).connectTimeout(Duration.ofSeconds(5))
                    .callDeadline(Duration.ofSeconds(10));
            if (kv[0].equals("tls")) {
                b.tls(tls);
            }
            try (IdgenClient c = b.build()) {
                long[] ids = c.nextIds(3);
                System.out.println(args[i] + ": ids " + ids[0] + ".." + ids[2]);
                connected++;
            } catch (RuntimeException e) {
                System.out.println(args[i] + ": FAILED: " + e);
                System.exit(1);
            }
        }
        System.out.println("connected: " + connected);
    }
}
