package admin

import (
	"net/http"
	"net/http/pprof"
)

// profiles serves Go's profiles on mux, as net/http/pprof does on the
// default mux, which the relay does not serve: only an operator who
// turned admin.profiling on, with the admin token, reaches them.
func profiles(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
