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

const usage = `postino: an SMTP relay with an outbox spool

Usage:
  postino serve [--config FILE] [--listen ADDR] [--admin ADDR] [--data DIR]
                [--smarthost HOST:PORT [--smarthost-tls none|starttls|tls]]
                [--backend bolt|mysql|dynamodb] [--dsn DSN] [--table NAME]
                [--plugin PATH]... [--dkim DOMAIN=SELECTOR:KEYFILE]...
  postino queue list [--status STATUS] [--limit N] [--json]
  postino queue search ID|MESSAGE-ID|RECIPIENT [--json]
  postino queue show ID [--json]
  postino queue retry ID
  postino queue cancel ID
  postino queue receipts ID [--out DIR] [--json]
  postino batch suspend CODE
  postino batch activate CODE
  postino events list [--state parked]
  postino events replay ID
  postino migrate --backend mysql --dsn DSN
  postino dynamodb create-table --table NAME [--endpoint URL]
  postino dkim keygen --domain D --selector S [--algorithm rsa|ed25519] [--bits N] --out DIR
  postino dkim check [--domain D] [--selector S] [--key FILE] [--resolver HOST:PORT]
  postino bounce parse FILE... [--json]
  postino pec parse FILE... [--json] [--trust-bundle FILE]
  postino config print [--config FILE]
  postino health [--admin ADDR]
  postino version

The queue, batch, events and health commands talk to a running relay's admin API: --admin
ADDR, else the relay's own admin.listen (from POSTINO_CONFIG or POSTINO_ADMIN), 127.0.0.1:8525
by default, with the token the relay reads (admin.token_file or admin.token_env, or
POSTINO_ADMIN_TOKEN_FILE or POSTINO_ADMIN_TOKEN_ENV). SIGHUP makes serve reload its DKIM keys.
`

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks a command line that cannot be understood.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "queue":
		err = queueCmd(ctx, args[1:], stdout)
	case "batch":
		err = batchCmd(ctx, args[1:], stdout)
	case "events":
		err = eventsCmd(ctx, args[1:], stdout)
	case "migrate":
		err = migrate(ctx, args[1:], stdout)
	case "dynamodb":
		err = dynamodbCmd(ctx, args[1:], stdout)
	case "dkim":
		err = dkimCmd(ctx, args[1:], stdout, stderr)
	case "bounce":
		err = bounceCmd(args[1:], stdout, stderr)
	case "pec":
		err = pecCmd(args[1:], stdout, stderr)
	case "config":
		err = configCmd(args[1:], stdout)
	case "health":
		err = healthCmd(ctx, args[1:], stdout)
	case "version", "--version":
		fmt.Fprintln(stdout, "postino", versionString())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "postino: %v\n\n%s", err, usage)
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

// parseFlags parses flags wherever they stand among the arguments
// (`queue show ID --json`), and returns the other arguments.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		if args[0] == "--" {
			return append(rest, args[1:]...), nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

func newFlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return fs
}

// wantArgs checks the number of arguments left after the flags.
func wantArgs(cmd string, args []string, names ...string) error {
	if len(args) != len(names) {
		return fmt.Errorf("%w: postino %s takes %s", errUsage, cmd, strings.Join(names, " "))
	}
	return nil
}
