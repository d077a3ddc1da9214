// Command coraza-gateway is Coraza (github.com/corazawaf/coraza, the engine the CRS
// project tests its rules against) in front of one backend: bench/crs --coraza runs CRS's
// regression suite through it for the reference count beside Sluice's engines and NGINX +
// ModSecurity. Each rule match is appended to -log in ModSecurity's error-log form
// (`[id "942100"] ... [msg "..."]`), which go-ftw reads as it reads NGINX's.
//
// Usage: coraza-gateway -listen 127.0.0.1:PORT -backend http://127.0.0.1:PORT -conf FILE -log FILE
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/corazawaf/coraza/v3"
	txhttp "github.com/corazawaf/coraza/v3/http"
	"github.com/corazawaf/coraza/v3/types"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	backend := flag.String("backend", "", "the backend's URL")
	conf := flag.String("conf", "", "the directives (SecLang; Include for the rule files)")
	logPath := flag.String("log", "", "where each match is appended")
	flag.Parse()
	if *backend == "" || *conf == "" || *logPath == "" {
		log.Fatal("coraza-gateway: -backend, -conf and -log are required")
	}
	target, err := url.Parse(*backend)
	if err != nil {
		log.Fatalf("coraza-gateway: -backend %q: %v", *backend, err)
	}
	out, err := os.OpenFile(*logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatalf("coraza-gateway: -log: %v", err)
	}
	var mu sync.Mutex
	record := func(rule types.MatchedRule) {
		// One write per line, unbuffered: go-ftw reads the file while it grows.
		line := rule.ErrorLog() + "\n"
		mu.Lock()
		defer mu.Unlock()
		if _, err := out.WriteString(line); err != nil {
			log.Printf("coraza-gateway: writing the log: %v", err)
		}
	}
	waf, err := coraza.NewWAF(coraza.NewWAFConfig().
		WithErrorCallback(record).
		WithDirectivesFromFile(*conf))
	if err != nil {
		log.Fatalf("coraza-gateway: the rules: %v", err)
	}
	server := &http.Server{
		Addr:              *listen,
		Handler:           txhttp.WrapHandler(waf, httputil.NewSingleHostReverseProxy(target)),
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Fatal(server.ListenAndServe())
}
