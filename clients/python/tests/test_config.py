"""clients/vectors/config.json: every URL and environment case parsed (no network), and the
rules for settings given in code next to a URL or the environment."""

import unittest

import _support
from _support import clean_env, no_connect
from idgen_client import Client, ConfigError, Settings, parse_url

FIELDS = ("tls", "ca", "cert", "key", "server_name", "connect_timeout_ms", "timeout_ms", "expand")


class Vectors(unittest.TestCase):
    def check(self, case, settings):
        self.assertEqual(list(settings.nodes), case["nodes"])
        for field in FIELDS:
            self.assertEqual(getattr(settings, field), case[field], field)

    def test_urls(self):
        for case in _support.config_cases(self, "urls"):
            with self.subTest(url=case["url"]):
                if "error" in case:
                    with self.assertRaises(ConfigError) as caught:
                        parse_url(case["url"])
                    self.assertIsInstance(caught.exception, ValueError)
                    self.assertTrue(str(caught.exception))
                else:
                    self.check(case, parse_url(case["url"]))
                    self.check(case, Settings.from_url(case["url"]))

    def test_envs(self):
        for case in _support.config_cases(self, "envs"):
            with self.subTest(env=case["env"]):
                if "error" in case:
                    with self.assertRaises(ConfigError):
                        Settings.from_env(case["env"])
                    with clean_env(**case["env"]), self.assertRaises(ConfigError):
                        Settings.from_env()  # the default: os.environ
                else:
                    self.check(case, Settings.from_env(case["env"]))
                    with clean_env(**case["env"]):
                        self.check(case, Settings.from_env())

    def test_errors_say_what_is_wrong(self):
        expect = {
            "http://h:7420": "scheme",
            "IDGEN://h": "lower case",
            "idgen://a:1,,b:2": "empty",
            "idgen://h:0": "1..=65535",
            "idgen://u@h": "user info",
            "idgen://h/x": "path",
            "idgen://h#f": "fragment",
            "idgen://h?tls=1": "unknown parameter 'tls'",
            "idgen://h?timeout_ms=1&timeout_ms=2": "twice",
            "idgen://h?timeout_ms": "no '=value'",
            "idgen://h?ca=/ca.pem": "use idgens://",
            "idgens://h?cert=/c.pem": "without key",
            "idgen://h?timeout_ms=3600001": "1..=3600000",
            "idgen://h?expand=yes": "'true' or 'false'",
            "idgen://h,h:7420": "listed twice",
            "idgen://[::1:7420": "unclosed",
        }
        for url, words in expect.items():
            with self.subTest(url=url), self.assertRaises(ConfigError) as caught:
                parse_url(url)
            self.assertIn(words, str(caught.exception))
        with self.assertRaises(ConfigError) as caught:
            Settings.from_env({})
        self.assertIn("IDGEN_NODES is not set", str(caught.exception))
        with self.assertRaises(ConfigError) as caught:
            Settings.from_env({"IDGEN_NODES": "idgen://a", "IDGEN_CLIENT_TIMEOUT_MS": "9"})
        self.assertIn("IDGEN_CLIENT_TIMEOUT_MS", str(caught.exception))
        with self.assertRaises(TypeError):
            parse_url(b"idgen://h")


class CodeSettings(unittest.TestCase):
    def test_client_kwargs(self):
        s = parse_url(
            "idgens://n1,[::1]:7421?ca=/ca.pem&cert=/c.pem&key=/k.pem&server_name=idgen.internal"
            "&connect_timeout_ms=250&timeout_ms=5000&expand=true"
        )
        self.assertEqual(
            s.client_kwargs(),
            {
                "nodes": ["n1:7420", "[::1]:7421"],
                "tls": True,
                "tls_ca": "/ca.pem",
                "tls_cert": "/c.pem",
                "tls_key": "/k.pem",
                "server_hostname": "idgen.internal",
                "connect_timeout": 0.25,
                "timeout": 5.0,
                "expand": True,
            },
        )
        self.assertEqual(parse_url("idgen://h").client_kwargs(), {"nodes": ["h:7420"]})
        self.assertEqual(
            parse_url("idgen://h").merge({"prefetch": 10}), {"nodes": ["h:7420"], "prefetch": 10}
        )

    def test_a_setting_given_both_ways_is_an_error(self):
        no_connect(self)
        with self.assertRaises(ConfigError) as caught:
            Client.from_url("idgen://h?timeout_ms=100", timeout=2.0)
        self.assertIn("timeout=", str(caught.exception))
        self.assertIn("timeout_ms", str(caught.exception))
        with self.assertRaises(ConfigError):
            Client.from_url("idgens://h?ca=/ca.pem", tls_ca="/other.pem")
        with self.assertRaises(ConfigError):
            Client.from_url("idgens://h?expand=true", expand=False)
        with self.assertRaises(ConfigError):
            Client.from_url("idgen://h", nodes=["x:1"])
        with self.assertRaises(ConfigError) as caught:
            Client.from_url("idgen://h", tls_ca="/ca.pem")  # plain URL, TLS in code
        self.assertIn("use idgens://", str(caught.exception))
        with clean_env(IDGEN_NODES="h:7420", IDGEN_CLIENT_CONNECT_TIMEOUT_MS="100"):
            with self.assertRaises(ConfigError) as caught:
                Client.from_env(connect_timeout=1.0)
            self.assertIn("the environment", str(caught.exception))

    def test_settings_not_in_the_url_come_from_code(self):
        no_connect(self)
        client = Client.from_url("idgen://a:1,b:2?timeout_ms=1500", connect_timeout=3.0,
                                 prefetch=0, sequence_prefetch=10)  # fmt: skip
        self.addCleanup(client.close)
        self.assertEqual([n["node"] for n in client.nodes()], ["a:1", "b:2"])
        self.assertEqual(client._timeout, 1.5)
        self.assertEqual(client._connect_timeout, 3.0)
        self.assertEqual(client._seq_prefetch, 10)
        with clean_env(IDGEN_NODES=" c:3 , d "):
            client = Client.from_env(timeout=2.0)
            self.addCleanup(client.close)
        self.assertEqual([n["node"] for n in client.nodes()], ["c:3", "d:7420"])
        self.assertEqual(client._timeout, 2.0)

    def test_bad_configuration_fails_before_any_connection(self):
        no_connect(self)
        with self.assertRaises(ConfigError):
            Client.from_url("idgen://h:0")
        with clean_env(), self.assertRaises(ConfigError):
            Client.from_env()
        with clean_env(IDGEN_NODES="a:1", IDGEN_CLIENT_CERT="/c.pem"), self.assertRaises(ConfigError):
            Client.from_env()
        with self.assertRaises(TypeError):
            Client.from_url("idgen://h", no_such_option=1)


if __name__ == "__main__":
    unittest.main()
