// Command idgen-bench measures the Go client's throughput against one node and prints one
// JSON line:
//
//	{"client":"go","batch":N,"ids_per_sec":X,"requests_per_sec":Y}
//
// Usage:
//
//	idgen-bench --addr 127.0.0.1:7420 --batch 4096 --seconds 5 --connections 2 --pipeline 8
//
// Each of --connections clients holds one connection; --pipeline goroutines per client
// keep that many requests of --batch IDs in flight on it. The run ends after --seconds
// (plus at most one request's time per goroutine); a warm-up of --warmup seconds runs
// before it and is not counted.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	idgen "github.com/idgen/idgen/clients/go"
)

type result struct {
	Client         string  `json:"client"`
	Batch          int     `json:"batch"`
	IDsPerSec      float64 `json:"ids_per_sec"`
	RequestsPerSec float64 `json:"requests_per_sec"`
	Errors         int64   `json:"errors,omitempty"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7420", "the node's ID protocol address (host:port)")
	batch := flag.Int("batch", 1, "IDs per request")
	seconds := flag.Float64("seconds", 5, "measured run time in seconds")
	warmup := flag.Float64("warmup", 1, "unmeasured warm-up in seconds")
	connections := flag.Int("connections", 1, "connections (one client each)")
	pipeline := flag.Int("pipeline", 1, "requests in flight per connection")
	version := flag.Int("protocol", 2, "highest protocol version offered (2: batches as ranges)")
	tlsCA := flag.String("tls-ca", "", "speak TLS: the nodes' CA bundle (PEM)")
	tlsCert := flag.String("tls-cert", "", "client certificate for mutual TLS (PEM)")
	tlsKey := flag.String("tls-key", "", "client key for mutual TLS (PEM)")
	flag.Parse()
	if *batch < 1 || *connections < 1 || *pipeline < 1 || *seconds <= 0 || *seconds > 3600 || *warmup < 0 {
		fmt.Fprintln(os.Stderr, "idgen-bench: --batch, --connections and --pipeline must be >= 1, --seconds in (0, 3600]")
		os.Exit(2)
	}
	opts := idgen.Options{Nodes: []string{*addr}, MaxVersion: uint16(*version),
		RequestTimeout: 5 * time.Second, ConnectTimeout: 5 * time.Second}
	if *tlsCA != "" {
		conf, err := idgen.LoadTLSConfig(idgen.TLSFiles{CA: *tlsCA, Cert: *tlsCert, Key: *tlsKey})
		if err != nil {
			fmt.Fprintln(os.Stderr, "idgen-bench:", err)
			os.Exit(2)
		}
		opts.TLS = conf
	}
	clients := make([]*idgen.Client, *connections)
	for i := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := idgen.Dial(ctx, opts)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "idgen-bench:", err)
			os.Exit(1)
		}
		defer c.Close()
		clients[i] = c
	}

	var measuring atomic.Bool
	var ids, requests, errorsSeen atomic.Int64
	var firstErr atomic.Value
	warmEnd := time.Now().Add(time.Duration(*warmup * float64(time.Second)))
	end := warmEnd.Add(time.Duration(*seconds * float64(time.Second)))
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(10*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range clients {
		for p := 0; p < *pipeline; p++ {
			wg.Add(1)
			go func(c *idgen.Client) {
				defer wg.Done()
				for time.Now().Before(end) {
					got, err := c.NextIDs(ctx, *batch)
					if err != nil {
						errorsSeen.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if measuring.Load() {
						ids.Add(int64(len(got)))
						requests.Add(1)
					}
				}
			}(c)
		}
	}
	time.Sleep(time.Until(warmEnd))
	measuring.Store(true)
	start := time.Now()
	time.Sleep(time.Until(end))
	measuring.Store(false)
	elapsed := time.Since(start).Seconds()
	wg.Wait()
	out := result{
		Client:         "go",
		Batch:          *batch,
		IDsPerSec:      float64(ids.Load()) / elapsed,
		RequestsPerSec: float64(requests.Load()) / elapsed,
		Errors:         errorsSeen.Load(),
	}
	if out.Errors > 0 {
		fmt.Fprintln(os.Stderr, "idgen-bench: first error:", firstErr.Load())
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	if errorsSeen.Load() > 0 {
		os.Exit(1)
	}
}
