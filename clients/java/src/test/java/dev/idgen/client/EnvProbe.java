package dev.idgen.client;

/**
 * The client side of {@link ConfigRealNodeTest}'s environment test, run in its own JVM with
 * IDGEN_NODES and IDGEN_CLIENT_* set: {@link IdgenClient#fromEnv()}, three IDs, {@code ok N}
 * printed; otherwise {@code error: MESSAGE} and exit 1.
 */
final class EnvProbe {
    private EnvProbe() {}

    public static void main(String[] args) {
        try (IdgenClient c = IdgenClient.fromEnv()) {
            System.out.println("ok " + c.nextIds(3).length + " from " + c.nodes().get(0).address());
        } catch (RuntimeException e) {
            System.out.println("error: " + e.getMessage());
            System.exit(1);
        }
    }
}
