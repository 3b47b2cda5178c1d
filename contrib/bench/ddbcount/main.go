// Command ddbcount is a counting proxy for DynamoDB: put it between the
// relay and DynamoDB Local (AWS_ENDPOINT_URL pointing at it) and it counts
// the round trips, by operation (the X-Amz-Target header). GET
// /_ddbcount answers the counts so far as JSON, so that a benchmark takes
// the difference before and after a run.
//
//	ddbcount -listen 127.0.0.1:8001 -target http://127.0.0.1:8000
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
)

// counts holds the round trips by operation.
type counts struct {
	mu sync.Mutex
	by map[string]int
}

func (c *counts) add(op string) {
	c.mu.Lock()
	c.by[op]++
	c.mu.Unlock()
}

// snapshot returns the counts with their total under "total".
func (c *counts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{"total": 0}
	for op, n := range c.by {
		out[op] = n
		out["total"] += n
	}
	return out
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8001", "`address` to listen on")
	target := flag.String("target", "http://127.0.0.1:8000", "DynamoDB `URL` to forward to")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil {
		log.Fatalf("ddbcount: -target: %v", err)
	}
	c := &counts{by: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_ddbcount", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(c.snapshot())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// "DynamoDB_20120810.TransactWriteItems" counts as TransactWriteItems.
		op := r.Header.Get("X-Amz-Target")
		if i := strings.LastIndexByte(op, '.'); i >= 0 {
			op = op[i+1:]
		}
		if op == "" {
			op = "other"
		}
		c.add(op)
		proxy.ServeHTTP(w, r)
	})
	log.Fatal(http.ListenAndServe(*listen, mux))
}
