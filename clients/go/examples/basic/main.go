// Command basic asks a node for IDs: go run ./examples/basic [host:port ...]
// (default 127.0.0.1:7420, what `idgen serve` listens on).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	idgen "github.com/idgen/idgen/clients/go"
)

func main() {
	nodes := os.Args[1:]
	if len(nodes) == 0 {
		nodes = []string{"127.0.0.1:7420"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	client, err := idgen.Dial(ctx, idgen.Options{Nodes: nodes})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	one, err := client.NextID(ctx) // a uint64 below 2^63
	if err != nil {
		log.Fatal(err)
	}
	many, err := client.NextIDs(ctx, 10000) // strictly increasing, all or nothing
	if err != nil {
		log.Fatal(err)
	}
	layout, _ := client.Layout(ctx)
	parts, _ := layout.Decode(one)
	b62, _ := idgen.FormatBase62(one)
	rtt, _ := client.Ping(ctx)
	fmt.Printf("id %d (base62 %s): %s, worker %d, sequence %d\n",
		one, b62, time.UnixMilli(int64(parts.UnixMs)).UTC().Format(time.RFC3339Nano), parts.Worker, parts.Sequence)
	fmt.Printf("%d more, %d .. %d; ping %s\n", len(many), many[0], many[len(many)-1], rtt)
}
