package dev.idgen.client;

import java.security.cert.CertPathValidatorException;
import java.security.cert.CertificateExpiredException;
import java.security.cert.CertificateNotYetValidException;

/** Names the cause of a failed TLS handshake from what JSSE reports. */
final class TlsErrors {
    private TlsErrors() {}

    static TlsException classify(Exception e, String node) {
        StringBuilder all = new StringBuilder();
        boolean expired = false;
        boolean path = false;
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof CertificateExpiredException || t instanceof CertificateNotYetValidException) {
                expired = true;
            }
            if (t instanceof CertPathValidatorException cpe) {
                path = true;
                if (cpe.getReason() == CertPathValidatorException.BasicReason.EXPIRED
                        || cpe.getReason() == CertPathValidatorException.BasicReason.NOT_YET_VALID) {
                    expired = true;
                }
            }
            if (t.getClass().getName().endsWith("SunCertPathBuilderException")) {
                path = true;
            }
            all.append(' ').append(t.getMessage());
        }
        String m = all.toString();
        TlsException.Kind kind;
        if (m.contains("Received fatal alert: no_application_protocol")) {
            kind = TlsException.Kind.NO_APPLICATION_PROTOCOL;
        } else if (m.contains("Received fatal alert: bad_certificate")
                || m.contains("Received fatal alert: certificate_required")
                || m.contains("Received fatal alert: unknown_ca")
                || m.contains("Received fatal alert: certificate_expired")
                || m.contains("Received fatal alert: certificate_unknown")
                || m.contains("Received fatal alert: access_denied")
                || m.contains("Received fatal alert: decrypt_error")) {
            kind = TlsException.Kind.CLIENT_CERTIFICATE_REJECTED;
        } else if (m.contains("No subject alternative") || m.contains("No name matching")) {
            kind = TlsException.Kind.NAME_MISMATCH;
        } else if (expired) {
            kind = TlsException.Kind.EXPIRED;
        } else if (path || m.contains("unable to find valid certification path")) {
            kind = TlsException.Kind.UNKNOWN_ISSUER;
        } else {
            kind = TlsException.Kind.HANDSHAKE;
        }
        String text = e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage();
        return new TlsException(kind, kind.name().toLowerCase() + ": " + text, node, e);
    }
}
