package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** The string forms of clients/vectors/forms.json (known answers); masking is MaskTest. */
class FormsTest {
    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> section(String name) throws Exception {
        return (List<Map<String, Object>>) ((Map<String, Object>) Support.json("clients/vectors/forms.json")).get(name);
    }

    @Test
    void everyFormKnownAnswerEncodesAndParses() throws Exception {
        List<Map<String, Object>> forms = section("forms");
        assertTrue(forms.size() >= 10);
        for (Map<String, Object> f : forms) {
            long id = Long.parseLong((String) f.get("id"));
            assertEquals(f.get("decimal"), IdForms.toDecimal(id));
            assertEquals(f.get("base62"), IdForms.toBase62(id));
            assertEquals(f.get("base32"), IdForms.toBase32(id));
            assertEquals(id, IdForms.parseDecimal((String) f.get("decimal")));
            assertEquals(id, IdForms.parseBase62((String) f.get("base62")));
            assertEquals(id, IdForms.parseBase32((String) f.get("base32")));
            assertEquals(id, IdForms.parseBase32(((String) f.get("base32")).toLowerCase()));
        }
    }

    @Test
    void everyInvalidTextIsRefusedWithAReason() throws Exception {
        List<Map<String, Object>> invalid = section("invalid");
        assertTrue(invalid.size() >= 10);
        for (Map<String, Object> c : invalid) {
            String text = (String) c.get("text");
            IdFormatException e = assertThrows(IdFormatException.class, () -> {
                switch ((String) c.get("form")) {
                    case "decimal" -> IdForms.parseDecimal(text);
                    case "base62" -> IdForms.parseBase62(text);
                    case "base32" -> IdForms.parseBase32(text);
                    default -> throw new AssertionError(c);
                }
            }, c.toString());
            assertTrue(e.getMessage() != null && !e.getMessage().isEmpty());
        }
    }

    @Test
    void base32AliasesParse() throws Exception {
        for (Map<String, Object> c : section("base32_aliases")) {
            assertEquals(Long.parseLong((String) c.get("id")), IdForms.parseBase32((String) c.get("text")));
        }
    }

    @Test
    void formsSortLikeTheNumbers() {
        Random r = new Random(42);
        long prev = -1;
        String prev62 = null;
        String prev32 = null;
        for (int i = 0; i < 5000; i++) {
            long id = prev + 1 + (r.nextLong() >>> 44);
            if (id < 0) {
                break;
            }
            String b62 = IdForms.toBase62(id);
            String b32 = IdForms.toBase32(id);
            if (prev62 != null) {
                assertTrue(prev62.compareTo(b62) < 0 && prev32.compareTo(b32) < 0);
            }
            prev = id;
            prev62 = b62;
            prev32 = b32;
        }
    }

    @Test
    void outOfRangeIdsAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> IdForms.toBase62(-1));
        assertThrows(IllegalArgumentException.class, () -> IdForms.toDecimal(Long.MIN_VALUE));
    }
}
