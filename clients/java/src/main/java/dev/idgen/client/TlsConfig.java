package dev.idgen.client;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Objects;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS settings for connections to nodes on a TLS listener: the authorities to verify nodes
 * against (a PEM bundle) and, for nodes that require mutual TLS, a client certificate chain
 * and its private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC, as cert-manager and openssl write
 * them; see {@link Builder#clientCertFiles}). Built with {@link #builder()}.
 *
 * <p>The node's certificate must chain to the bundle and name the host dialed (its DNS name,
 * or the IP address when an address is dialed), or the {@linkplain Builder#serverName server
 * name} given; this cannot be turned off. Connections offer TLS 1.3 and 1.2 and ALPN {@code
 * idgen/1}.
 */
public final class TlsConfig {
    /** The ALPN protocol of the ID protocol over TLS. */
    public static final String ALPN = "idgen/1";

    private final SSLContext context;
    private final String serverName;
    private final boolean clientCertificate;

    private TlsConfig(SSLContext context, String serverName, boolean clientCertificate) {
        this.context = context;
        this.serverName = serverName;
        this.clientCertificate = clientCertificate;
    }

    /** Whether a client certificate is configured (always assumed with an own SSLContext). */
    boolean hasClientCertificate() {
        return clientCertificate;
    }

    public static Builder builder() {
        return new Builder();
    }

    /** The name nodes' certificates are verified against, or {@code null} for each node's host. */
    public String serverName() {
        return serverName;
    }

    /** Builds a {@link TlsConfig}. */
    public static final class Builder {
        private Path caFile;
        private byte[] caPem;
        private Path certFile;
        private Path keyFile;
        private String serverName;
        private SSLContext context;
        private boolean systemRoots;

        private Builder() {}

        /**
         * Verify nodes against the JDK's default trust store (the system's roots) instead of a
         * CA bundle: for nodes whose certificates a public or company-wide authority signed
         * ({@code idgens://} without {@code ca}).
         */
        public Builder systemRoots() {
            this.systemRoots = true;
            return this;
        }

        /** The PEM bundle of authorities nodes' certificates must chain to. */
        public Builder caFile(Path path) {
            this.caFile = Objects.requireNonNull(path);
            return this;
        }

        /** The authorities as PEM text (instead of {@link #caFile}). */
        public Builder caPem(String pem) {
            this.caPem = pem.getBytes(StandardCharsets.UTF_8);
            return this;
        }

        /**
         * A client certificate chain (PEM) and its unencrypted private key (PEM), for mutual TLS.
         * The key may be PKCS#8 ({@code BEGIN PRIVATE KEY}: RSA, RSASSA-PSS, EC, Ed25519, Ed448),
         * PKCS#1 ({@code BEGIN RSA PRIVATE KEY}) or SEC1 ({@code BEGIN EC PRIVATE KEY}, on P-256,
         * P-384 or P-521, with or without an {@code EC PARAMETERS} block): cert-manager's
         * {@code tls.key} in either {@code privateKey.encoding}.
         */
        public Builder clientCertFiles(Path certChain, Path privateKey) {
            this.certFile = Objects.requireNonNull(certChain);
            this.keyFile = Objects.requireNonNull(privateKey);
            return this;
        }

        /** Verify every node's certificate against this name instead of the host dialed. */
        public Builder serverName(String name) {
            if (name == null || name.isEmpty()) {
                throw new IllegalArgumentException("the server name must not be empty");
            }
            this.serverName = name;
            return this;
        }

        /**
         * An {@link SSLContext} of one's own (its trust managers verify the chain; the client
         * still verifies the host name). Replaces the CA bundle and client certificate.
         */
        public Builder sslContext(SSLContext context) {
            this.context = Objects.requireNonNull(context);
            return this;
        }

        /**
         * @throws IllegalArgumentException when a file is missing or holds no usable
         *     certificate or key (the message names the file; never the key's contents)
         */
        public TlsConfig build() {
            if (context != null) {
                if (caFile != null || caPem != null || certFile != null) {
                    throw new IllegalArgumentException("give sslContext or CA and client files, not both");
                }
                return new TlsConfig(context, serverName, true);
            }
            if (caFile == null && caPem == null && !systemRoots) {
                throw new IllegalArgumentException("TLS needs the authorities to verify nodes with (caFile, or systemRoots())");
            }
            if (systemRoots && (caFile != null || caPem != null)) {
                throw new IllegalArgumentException("give a CA bundle or systemRoots(), not both");
            }
            try {
                KeyStore trust = null;
                if (!systemRoots) {
                    byte[] ca = caPem != null ? caPem : read(caFile, "CA bundle");
                    String caName = caFile != null ? caFile.toString() : "the CA PEM";
                    List<X509Certificate> roots = certificates(ca, caName);
                    trust = KeyStore.getInstance("PKCS12");
                    trust.load(null, null);
                    for (int i = 0; i < roots.size(); i++) {
                        trust.setCertificateEntry("ca-" + i, roots.get(i));
                    }
                }
                TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
                tmf.init(trust);
                KeyManagerFactory kmf = null;
                if (certFile != null) {
                    List<X509Certificate> chain = certificates(read(certFile, "client certificate"), certFile.toString());
                    PrivateKey key = PemKeys.read(read(keyFile, "client key"), keyFile.toString());
                    KeyStore ks = KeyStore.getInstance("PKCS12");
                    ks.load(null, null);
                    char[] pw = new char[0];
                    ks.setKeyEntry("client", key, pw, chain.toArray(new Certificate[0]));
                    kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                    kmf.init(ks, pw);
                }
                SSLContext ctx = SSLContext.getInstance("TLS");
                ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
                return new TlsConfig(ctx, serverName, kmf != null);
            } catch (GeneralSecurityException | IOException e) {
                throw new IllegalArgumentException("cannot set up TLS: " + e.getMessage(), e);
            }
        }
    }

    private static byte[] read(Path path, String what) {
        try {
            return Files.readAllBytes(path);
        } catch (IOException e) {
            throw new IllegalArgumentException("cannot read the " + what + " " + path + ": " + e, e);
        }
    }

    static List<X509Certificate> certificates(byte[] pem, String name) throws GeneralSecurityException {
        CertificateFactory cf = CertificateFactory.getInstance("X.509");
        Collection<? extends Certificate> all;
        try {
            all = cf.generateCertificates(new ByteArrayInputStream(pem));
        } catch (GeneralSecurityException e) {
            throw new IllegalArgumentException(name + " holds no readable PEM certificate: " + e.getMessage(), e);
        }
        List<X509Certificate> out = new ArrayList<>();
        for (Certificate c : all) {
            out.add((X509Certificate) c);
        }
        if (out.isEmpty()) {
            throw new IllegalArgumentException(name + " holds no PEM certificate");
        }
        return out;
    }

    /** Wraps a connected socket in TLS (not yet handshaken) for {@code host}. */
    SSLSocket wrap(Socket raw, String host, int port) throws IOException {
        String name = serverName != null ? serverName : host;
        SSLSocket s = (SSLSocket) context.getSocketFactory().createSocket(raw, name, port, true);
        SSLParameters p = s.getSSLParameters();
        p.setEndpointIdentificationAlgorithm("HTTPS");
        p.setApplicationProtocols(new String[] {ALPN});
        p.setProtocols(new String[] {"TLSv1.3", "TLSv1.2"});
        if (!isIpLiteral(name)) {
            p.setServerNames(List.of(new SNIHostName(name)));
        }
        s.setSSLParameters(p);
        s.setUseClientMode(true);
        return s;
    }

    static boolean isIpLiteral(String host) {
        if (host.indexOf(':') >= 0) {
            return true; // IPv6
        }
        if (!host.matches("[0-9.]+")) {
            return false;
        }
        try {
            InetAddress.getByName(host);
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}
