// Command testplugin is a status-callback plugin for the relay's tests. It
// appends every event it gets to $TESTPLUGIN_OUT (JSON lines, with its
// process id and the time it got the event) and behaves as $TESTPLUGIN_MODE
// says:
//
//	ok           acknowledge
//	fail-twice   fail the first two tries of each event
//	hang-once    never answer the first try of each event
//	exit-once    exit in the middle of the first try of each event
//	fail-while   fail while the file $TESTPLUGIN_GATE exists
//	hold-while   answer only once the file $TESTPLUGIN_GATE is gone
//	slow         take $TESTPLUGIN_DELAY before acknowledging
//	old          speak another version of the plugin contract
//	refuse-while exit at start, saying why on standard error, while the
//	             file $TESTPLUGIN_GATE exists
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/genropy/postino/plugins/sdk"
)

type testPlugin struct {
	mode, out, state string
	mu               sync.Mutex
}

func (p *testPlugin) Outcomes() []string {
	if o := os.Getenv("TESTPLUGIN_OUTCOMES"); o != "" {
		return strings.Split(o, ",")
	}
	return nil
}

// try counts the tries of an event, across restarts of the plugin.
func (p *testPlugin) try(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	path := filepath.Join(p.state, id)
	b, _ := os.ReadFile(path)
	n := len(b) + 1
	os.WriteFile(path, append(b, 'x'), 0o644)
	return n
}

func (p *testPlugin) record(e *sdk.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(struct {
		*sdk.Event
		PID        int       `json:"pid"`
		ReceivedAt time.Time `json:"received_at"`
	}{e, os.Getpid(), time.Now()})
	f.Write(append(b, '\n'))
}

func (p *testPlugin) Deliver(ctx context.Context, e *sdk.Event) error {
	p.record(e)
	n := p.try(e.EventID)
	switch p.mode {
	case "fail-twice":
		if n <= 2 {
			return fmt.Errorf("failing try %d on purpose", n)
		}
	case "hang-once":
		if n == 1 {
			<-ctx.Done()
			time.Sleep(time.Hour)
		}
	case "exit-once":
		if n == 1 {
			os.Exit(3)
		}
	case "fail-while":
		if gateClosed() {
			return errors.New("the gate is closed")
		}
	case "hold-while":
		for gateClosed() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	case "slow":
		d, _ := time.ParseDuration(os.Getenv("TESTPLUGIN_DELAY"))
		time.Sleep(d)
	}
	return nil
}

// gateClosed reports whether the file $TESTPLUGIN_GATE exists.
func gateClosed() bool {
	_, err := os.Stat(os.Getenv("TESTPLUGIN_GATE"))
	return err == nil
}

func main() {
	p := &testPlugin{mode: os.Getenv("TESTPLUGIN_MODE"), out: os.Getenv("TESTPLUGIN_OUT"), state: os.Getenv("TESTPLUGIN_STATE")}
	if p.mode == "refuse-while" && gateClosed() {
		fmt.Fprintln(os.Stderr, "cannot start: the gate is closed")
		os.Exit(1)
	}
	if p.mode == "old" {
		hs := sdk.Handshake()
		hs.ProtocolVersion = sdk.ProtocolVersion + 98
		plugin.Serve(&plugin.ServeConfig{HandshakeConfig: hs, Plugins: sdk.Plugins(p), GRPCServer: plugin.DefaultGRPCServer})
		return
	}
	sdk.Serve(p)
}
