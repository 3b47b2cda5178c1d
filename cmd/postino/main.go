// Command postino is the Postino relay and its operator tools.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/genropy/postino/relay"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks a command line that cannot be understood.
var errUsage = relay.ErrUsage

// run runs the command args name and returns the exit status: 0, 1 when
// the command failed, 2 when the command line is wrong. A usage error is
// told in one line, followed by the usage of the command at fault.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	usage, err := dispatch(ctx, args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "postino: %s\n%s", strings.TrimPrefix(err.Error(), errUsage.Error()+": "), usage)
		return 2
	}
	fmt.Fprintf(stderr, "postino: %v\n", err)
	return 1
}

func versionString() string {
	if version != "" {
		return version
	}
	return relay.Version()
}
