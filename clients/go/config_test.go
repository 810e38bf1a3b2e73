package idgen

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"
)

type configCase struct {
	URL              string            `json:"url"`
	Env              map[string]string `json:"env"`
	Error            string            `json:"error"`
	Nodes            []string          `json:"nodes"`
	TLS              bool              `json:"tls"`
	CA               *string           `json:"ca"`
	Cert             *string           `json:"cert"`
	Key              *string           `json:"key"`
	ServerName       *string           `json:"server_name"`
	ConnectTimeoutMs *int64            `json:"connect_timeout_ms"`
	TimeoutMs        *int64            `json:"timeout_ms"`
	Expand           bool              `json:"expand"`
}

func (cc configCase) check(t *testing.T, name string, cfg Config, err error) {
	t.Helper()
	if cc.Error != "" {
		if err == nil {
			t.Errorf("%s: want an error (%s), got %+v", name, cc.Error, cfg)
		} else if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "configuration") {
			t.Errorf("%s: the error (%s) is not a configuration ErrInvalidArgument: %v", name, cc.Error, err)
		} else {
			t.Logf("%s (%s): %v", name, cc.Error, err)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	ms := func(p *int64) time.Duration {
		if p == nil {
			return 0
		}
		return time.Duration(*p) * time.Millisecond
	}
	if strings.Join(cfg.Nodes, " ") != strings.Join(cc.Nodes, " ") || cfg.TLS != cc.TLS ||
		cfg.CA != str(cc.CA) || cfg.Cert != str(cc.Cert) || cfg.Key != str(cc.Key) ||
		cfg.ServerName != str(cc.ServerName) || cfg.ConnectTimeout != ms(cc.ConnectTimeoutMs) ||
		cfg.RequestTimeout != ms(cc.TimeoutMs) || cfg.Expand != cc.Expand {
		t.Errorf("%s: got %+v, want %+v", name, cfg, cc)
	}
}

// clients/vectors/config.json: every URL and environment case.
func TestConfigVectors(t *testing.T) {
	var v struct {
		URLs []configCase `json:"urls"`
		Envs []configCase `json:"envs"`
	}
	loadJSON(t, "clients/vectors/config.json", &v)
	if len(v.URLs) == 0 || len(v.Envs) == 0 {
		t.Fatal("config.json has no cases")
	}
	for _, c := range v.URLs {
		cfg, err := ParseURL(c.URL)
		c.check(t, c.URL, cfg, err)
	}
	for _, c := range v.Envs {
		env := c.Env
		cfg, err := ConfigFromLookup(func(k string) (string, bool) {
			if !strings.HasPrefix(k, "IDGEN_") {
				t.Errorf("ConfigFromLookup read %s", k)
			}
			v, ok := env[k]
			return v, ok
		})
		c.check(t, "env "+strings.TrimSpace(strings.Join(sortedEnv(env), " ")), cfg, err)
	}
	t.Logf("%d URL cases, %d environment cases", len(v.URLs), len(v.Envs))
}

func sortedEnv(env map[string]string) []string {
	var out []string
	for _, k := range []string{"IDGEN_NODES", "IDGEN_CLIENT_CA", "IDGEN_CLIENT_CERT", "IDGEN_CLIENT_KEY",
		"IDGEN_CLIENT_SERVER_NAME", "IDGEN_CLIENT_CONNECT_TIMEOUT_MS", "IDGEN_CLIENT_TIMEOUT_MS"} {
		if v, ok := env[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// A setting given both in code and in the URL is an error; the others keep their meaning.
func TestConfigAndOptionsGiveEachSettingOnce(t *testing.T) {
	cfg, err := ParseURL("idgen://a:1,b:2?timeout_ms=250&expand=false")
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]Options{
		"Nodes":          {Nodes: []string{"c:3"}},
		"TLS":            {TLS: tlsConfigForTest()},
		"RequestTimeout": {RequestTimeout: time.Second},
		"Expand":         {Expand: true},
	} {
		if _, err := cfg.Options(o); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s in both: %v", name, err)
		}
	}
	o, err := cfg.Options(Options{Prefetch: 8, ConnectTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Nodes, ",") != "a:1,b:2" || o.RequestTimeout != 250*time.Millisecond ||
		o.ConnectTimeout != 3*time.Second || o.Prefetch != 8 || o.TLS != nil || o.Expand {
		t.Fatalf("merged options: %+v", o)
	}
	if _, err := NewClientFromURL("idgen://a:1", Options{Nodes: []string{"a:1"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NewClientFromURL with Options.Nodes: %v", err)
	}
	if _, err := NewClientFromURL("idgens://a:1?ca=/nonexistent/ca.pem", Options{}); err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("a missing CA file: %v", err)
	}
	c, err := NewClientFromURL("idgens://a:1?server_name=idgen.internal", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.opts.TLS.ServerName; got != "idgen.internal" {
		t.Fatalf("server_name: %q", got)
	}
	if c.opts.TLS.RootCAs != nil {
		t.Fatal("idgens:// without ca must use the system roots")
	}
}

func tlsConfigForTest() *tls.Config { return &tls.Config{ServerName: "x"} }
