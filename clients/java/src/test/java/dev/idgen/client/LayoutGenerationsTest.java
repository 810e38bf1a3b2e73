package dev.idgen.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Layout generations: every case of clients/vectors/layouts.json, and broken lists. */
class LayoutGenerationsTest {
    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> clusters() throws Exception {
        return (List<Map<String, Object>>) ((Map<String, Object>) Support.json("clients/vectors/layouts.json")).get("clusters");
    }

    @Test
    @SuppressWarnings("unchecked")
    void everyVectorDecodes() throws Exception {
        List<Map<String, Object>> clusters = clusters();
        assertTrue(clusters.size() >= 3);
        for (Map<String, Object> c : clusters) {
            LayoutGenerations gens = LayoutGenerations.fromJson(Map.of("layouts", c.get("layouts")));
            for (Map<String, Object> d : (List<Map<String, Object>>) c.get("decode")) {
                long id = Long.parseLong((String) d.get("id"));
                LayoutGenerations.Decoded got = gens.decode(id);
                String where = c.get("name") + ": " + id;
                assertEquals(((Number) d.get("layout_generation")).intValue(), got.generation(), where);
                assertEquals(((Number) d.get("unix_ms")).longValue(), got.parts().unixMs(), where);
                assertEquals(((Number) d.get("timestamp")).longValue(), got.parts().timestamp(), where);
                assertEquals(((Number) d.get("worker")).longValue(), got.parts().worker(), where);
                assertEquals(((Number) d.get("region")).longValue(), got.parts().region(), where);
                assertEquals(((Number) d.get("sequence")).longValue(), got.parts().sequence(), where);
            }
            for (Object bad : (List<Object>) c.get("invalid")) {
                long id = Long.parseUnsignedLong((String) bad);
                assertThrows(IllegalArgumentException.class, () -> gens.decode(id));
            }
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void listsThatBreakTheRulesAreRefused() throws Exception {
        List<Map<String, Object>> good = (List<Map<String, Object>>) clusters().get(0).get("layouts");
        List<List<Map<String, Object>>> bad = new ArrayList<>();
        bad.add(List.of());
        String[][] changes = {{"first_id_str", "12345"}, {"switch_unix_ms", null}, {"timestamp_bits", "43"},
            {"epoch_ms", "epoch0"}, {"layout_generation", "2"}};
        for (String[] ch : changes) {
            List<Map<String, Object>> list = new ArrayList<>();
            for (Map<String, Object> g : good) {
                list.add(new HashMap<>(g));
            }
            Object value = ch[1] == null ? null
                    : ch[0].equals("first_id_str") ? ch[1]
                    : ch[1].equals("epoch0") ? good.get(0).get("epoch_ms") : (Object) Long.parseLong(ch[1]);
            list.get(1).put(ch[0], value);
            bad.add(list);
        }
        for (List<Map<String, Object>> list : bad) {
            assertThrows(IllegalArgumentException.class, () -> LayoutGenerations.fromJson(list), list.toString());
        }
    }
}
