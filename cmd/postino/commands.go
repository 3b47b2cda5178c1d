package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/genropy/postino/relay/delivery"
)

// command is one postino command.
type command struct {
	// name is the words after postino: "queue show".
	name string
	// synopsis is its arguments and every one of its flags, as the usage
	// shows them; the help test holds it to the flags the command defines.
	synopsis string
	// summary says in a line what it does.
	summary string
	run     func(ctx context.Context, inv *invocation) error
}

// clientFlags is the synopsis of the flags every command that talks to a
// running relay takes.
const clientFlags = " [--admin ADDR] [--config FILE]"

// commands is every command, in the order the usage lists them.
func commands() []command {
	return []command{
		{"serve", "[--config FILE] [--listen ADDR] [--admin ADDR] [--data DIR] [--smarthost HOST:PORT] " +
			"[--smarthost-tls " + strings.Join(delivery.TLSModes(), "|") + "] [--backend bolt|mysql|postgres|dynamodb] [--dsn DSN] [--table NAME] " +
			"[--spool-store local|shared|outbox] [--plugin PATH]... [--dkim DOMAIN=SELECTOR:KEYFILE]...",
			"run the relay: SMTP intake, delivery, mailbox pollers, plugins and the admin API", serve},
		{"queue list", "[--status STATUS] [--batch CODE] [--limit N] [--json]" + clientFlags, "list the messages of the outbox, newest first", queueList},
		{"queue search", "ID|MESSAGE-ID|RECIPIENT [--json]" + clientFlags, "find messages by id, Message-ID or recipient", queueSearch},
		{"queue show", "ID [--json]" + clientFlags, "show a message: its recipients, events and history", queueShow},
		{"queue retry", "ID [--now] [--json]" + clientFlags,
			"send a message again: now, or, for one cancelled while it waited for its X-Postino-Send-After, at that time unless --now", queueRetry},
		{"queue cancel", "ID [--json]" + clientFlags, "stop sending a message: it becomes FAILED and the plugins are told", queueCancel},
		{"queue receipts", "ID [--out DIR] [--json]" + clientFlags, "list the PEC receipts kept with a message, or write them into DIR", queueReceipts},
		{"batch list", "[--limit N] [--after CODE] [--json]" + clientFlags, "list the batches with their progress and the brake's rates", batchList},
		{"batch show", "CODE [--json]" + clientFlags, "show a batch: its messages by status, the brake's counts and why it is suspended", batchShow},
		{"batch cancel", "CODE --reason TEXT [--json]" + clientFlags, "end a batch's waiting messages (FAILED, the plugins told why) and hold the rest", batchCancel},
		{"batch suspend", "CODE" + clientFlags, "hold the messages of a batch", batchSuspend},
		{"batch activate", "CODE" + clientFlags, "let the messages of a held batch go on, and start the brake's counts again", batchActivate},
		{"destinations list", "[--json]" + clientFlags,
			"list the sites of MX delivery the relay has mail for: state, domains, queued, in flight, limits now", destinationsList},
		{"destinations show", "SITE [--json]" + clientFlags,
			"show a site: its domains, limits now and why (rule, AIMD share, the fleet's slots), last replies and state", destinationsShow},
		{"destinations suspend", "SITE --for DURATION [--json]" + clientFlags,
			"hold a site's mail (a provider's name is its site) on every relay of the outbox until the time ends", destinationsSuspend},
		{"destinations resume", "SITE" + clientFlags, "end a site's suspension", destinationsResume},
		{"events list", "[--state failing|pending|calling|acked|parked] [--limit N] [--json]" + clientFlags,
			"list the events told to plugins: by default the failing ones, with their tries", eventsList},
		{"events replay", "ID [--json]" + clientFlags, "send a parked event to the plugins again", eventsReplay},
		{"suppression list", "[--prefix PREFIX] [--reason REASON] [--limit N] [--after CURSOR] [--json]" + clientFlags,
			"list the suppressed addresses, and count them by reason", suppressionList},
		{"suppression show", "ADDRESS [--json]" + clientFlags, "show an address's entries of the suppression list and their history", suppressionShow},
		{"suppression check", "ADDRESS [--stream STREAM] [--json]" + clientFlags,
			"say whether mail of a stream to an address would be held back now, and by which entries", suppressionCheck},
		{"suppression add", "ADDRESS [--scope STREAM] [--reason REASON] [--expires TIME|DURATION] [--note TEXT] [--operator NAME] [--json]" + clientFlags,
			"suppress an address: the relay sends it no mail of the scope's streams", suppressionAdd},
		{"suppression remove", "ADDRESS [--scope STREAM] [--note TEXT] [--operator NAME] [--json]" + clientFlags,
			"take an address's entry off the suppression list", suppressionRemove},
		{"suppression import", "FILE [--scope STREAM] [--operator NAME] [--json]" + clientFlags,
			"add the entries of a CSV file (- for standard input): every one, or none when a line is bad", suppressionImport},
		{"suppression export", "[FILE] [--prefix PREFIX] [--reason REASON] [--json]" + clientFlags,
			"write the suppression list as CSV to FILE, or to standard output", suppressionExport},
		{"migrate", "[--backend mysql|postgres|bolt|dynamodb] [--dsn DSN] [--config FILE]", "bring a MySQL or PostgreSQL outbox's schema up to date", migrate},
		{"submissions schema", "postgres|mysql [--table NAME]", "print the DDL of the table apps write their mail to in their own transactions", submissionsSchema},
		{"submissions migrate", "--driver postgres|mysql --dsn DSN [--table NAME]", "create the submissions table in an app's database", submissionsMigrate},
		{"dynamodb create-table", "--table NAME [--endpoint URL] [--region REGION] [--seed-index]",
			"make the DynamoDB outbox table, or add what it lacks", dynamodbCreateTable},
		{"dkim keygen", "--domain D --selector S --out DIR [--algorithm rsa|ed25519] [--bits N]",
			"make a DKIM key and print the DNS record to publish", dkimKeygen},
		{"dkim check", "[--domain D] [--selector S] [--key FILE] [--eml FILE] [--record RECORD] [--resolver HOST:PORT] " +
			"[--dkim DOMAIN=SELECTOR:KEYFILE]... [--config FILE]",
			"check the DKIM keys against their records, or verify the signatures of a message (--eml)", dkimCheck},
		{"bounce parse", "FILE... [--json] [--config FILE]", "show what the relay reads in bounce messages", bounceParse},
		{"pec parse", "FILE... [--json] [--trust-bundle FILE] [--at TIME] [--config FILE]", "show what the relay reads in PEC receipts", pecParse},
		{"config print", "[--config FILE]", "print the configuration serve would run with, checked as config check does", configPrint},
		{"config check", "[--config FILE]", "check the configuration as serve does before it starts, short of reaching the network: " +
			"the files and variables it names, the routes' TLS and AUTH, the DKIM keys", configCheck},
		{"health", "[--timeout DURATION]" + clientFlags, "exit 0 when the relay is ready or degraded, for health checks", healthCmd},
		{"version", "", "print the version", versionCmd},
	}
}

// invocation is a command being run.
type invocation struct {
	cmd            command
	args           []string // after the command's name
	stdout, stderr io.Writer
}

// flags returns an empty flag set for the command: parse prints the help
// and the errors.
func (inv *invocation) flags() *flag.FlagSet {
	fs := flag.NewFlagSet(inv.cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses the command's flags wherever they stand among its
// arguments, and returns the other arguments. --help prints the command's
// help and returns flag.ErrHelp; a flag it does not know is a usage error.
func (inv *invocation) parse(fs *flag.FlagSet) ([]string, error) {
	rest, err := parseFlags(fs, inv.args)
	if errors.Is(err, flag.ErrHelp) {
		printHelp(inv.stdout, inv.cmd, fs)
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", errUsage, inv.cmd.name, flagError(err))
	}
	return rest, nil
}

// flagError words the flag package's errors as the help writes flags:
// with two dashes.
func flagError(err error) string {
	msg := err.Error()
	for _, form := range []struct{ prefix, format string }{
		{"flag provided but not defined: -", "unknown flag --%s"},
		{"flag needs an argument: -", "flag --%s needs a value"},
	} {
		if name, ok := strings.CutPrefix(msg, form.prefix); ok {
			return fmt.Sprintf(form.format, name)
		}
	}
	return msg
}

// parseArgs parses the flags and checks that the arguments left are names.
func (inv *invocation) parseArgs(fs *flag.FlagSet, names ...string) ([]string, error) {
	rest, err := inv.parse(fs)
	if err != nil {
		return nil, err
	}
	return rest, wantArgs(inv.cmd.name, rest, names...)
}

// configFlag adds --config; what says what the command reads in the file.
func configFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("config", os.Getenv("POSTINO_CONFIG"), "YAML configuration `file`"+what+" (default: POSTINO_CONFIG)")
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

// wantArgs checks the number of arguments left after the flags; a name
// in brackets ([FILE]) is one that may be left out.
func wantArgs(cmd string, args []string, names ...string) error {
	optional := 0
	for _, n := range names {
		if strings.HasPrefix(n, "[") {
			optional++
		}
	}
	if len(args) <= len(names) && len(args) >= len(names)-optional {
		return nil
	}
	if len(names) == 0 {
		return fmt.Errorf("%w: %s takes no arguments, only flags (%q is not one)", errUsage, cmd, args[0])
	}
	return fmt.Errorf("%w: %s takes %s", errUsage, cmd, strings.Join(names, " "))
}

// required names the flags among names that were left empty.
func required(fs *flag.FlagSet, names ...string) error {
	var missing []string
	for _, name := range names {
		if fs.Lookup(name).Value.String() == "" {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("needs %s", joinWords(missing, "and"))
}

// dispatch finds the command args name and runs it. The usage it returns
// is what to print under a usage error: the command's, its group's, or the
// list of commands.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) (usage string, err error) {
	all := commands()
	if len(args) == 0 {
		return commandList(all), fmt.Errorf("%w: no command given", errUsage)
	}
	if isHelp(args[0]) {
		if len(args) == 1 {
			_, err := fmt.Fprint(stdout, usageText(all))
			return "", err
		}
		// postino help queue show is postino queue show --help.
		return dispatch(ctx, append(args[1:len(args):len(args)], "--help"), stdout, stderr)
	}
	if args[0] == "--version" {
		args = []string{"version"}
	}
	if c, rest, ok := findCommand(all, args); ok {
		inv := &invocation{cmd: c, args: rest, stdout: stdout, stderr: stderr}
		return "usage: " + usageLine(c), c.run(ctx, inv)
	}
	if n := leadingFlags(args); n > 0 {
		if n == len(args) {
			return commandList(all), fmt.Errorf("%w: no command after %s: flags go with a command, before or after its name "+
				"(postino --admin ADDR queue list, or postino queue list --admin ADDR)", errUsage, strings.Join(args, " "))
		}
		// The words after the flags name no command: say what is wrong
		// with them.
		return dispatch(ctx, args[n:], stdout, stderr)
	}
	group := groupOf(all, args[0])
	switch {
	case len(group) == 0:
		return commandList(all), fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	case len(args) > 1 && isHelp(args[1]):
		_, err := fmt.Fprintf(stdout, "Usage:\n%s\n'postino %s COMMAND --help' describes a command's flags.\n", indent(group, "  "), args[0])
		return "", err
	case len(args) == 1:
		return "usage:\n" + indent(group, "  ") + "\n", fmt.Errorf("%w: %s needs a command: %s", errUsage, args[0], subcommands(group))
	}
	return "usage:\n" + indent(group, "  ") + "\n", fmt.Errorf("%w: unknown %s command %q: use %s", errUsage, args[0], args[1], subcommands(group))
}

// findCommand finds the command args name, and the arguments it takes: the
// words after its name, and the flags put before the name (postino --admin
// ADDR queue list is postino queue list --admin ADDR), which the command's
// own flag set parses as any of its flags.
func findCommand(all []command, args []string) (command, []string, bool) {
	for at := range leadingFlags(args) + 1 {
		for _, c := range all {
			words := strings.Fields(c.name)
			if len(args)-at >= len(words) && slices.Equal(args[at:at+len(words)], words) {
				return c, append(slices.Clip(args[:at]), args[at+len(words):]...), true
			}
		}
	}
	return command{}, nil, false
}

// leadingFlags counts the arguments at the start of args that may be flags
// and their values: each starts with "-", or follows one that does and
// may take a value (no "=" in it). Which flag takes a value only the
// command knows, so findCommand tries each place a name may start.
func leadingFlags(args []string) int {
	n := 0
	for n < len(args) {
		switch {
		case isFlag(args[n]):
			n++
		case n > 0 && isFlag(args[n-1]) && !strings.Contains(args[n-1], "="):
			n++
		default:
			return n
		}
	}
	return n
}

func isFlag(arg string) bool {
	return strings.HasPrefix(arg, "-") && arg != "-" && arg != "--"
}

func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "--help" || arg == "-help"
}

// groupOf returns the commands whose name starts with the word group.
func groupOf(all []command, group string) []command {
	var out []command
	for _, c := range all {
		if first, _, ok := strings.Cut(c.name, " "); ok && first == group {
			out = append(out, c)
		}
	}
	return out
}

// subcommands names the second words of a group's commands: "list, show or retry".
func subcommands(group []command) string {
	names := make([]string, len(group))
	for i, c := range group {
		_, names[i], _ = strings.Cut(c.name, " ")
	}
	return joinWords(names, "or")
}

// joinWords joins words as a sentence does: "a, b and c".
func joinWords(words []string, conj string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}

// commandList names every command's first word, for an unknown command.
func commandList(all []command) string {
	var names []string
	for _, c := range all {
		first, _, _ := strings.Cut(c.name, " ")
		if !slices.Contains(names, first) {
			names = append(names, first)
		}
	}
	return "commands: " + strings.Join(names, ", ") + "; 'postino help' shows their usage\n"
}

// usageWidth is where synopses are wrapped.
const usageWidth = 100

// synopsisLines is "postino NAME SYNOPSIS" after prefix, wrapped between
// its words (a bracketed group is one word) to usageWidth, the
// continuation lines under the first argument.
func synopsisLines(c command, prefix string) string {
	head := prefix + "postino " + c.name
	cont := strings.Repeat(" ", len(head))
	var lines []string
	line := head
	for _, w := range synopsisWords(c.synopsis) {
		if len(line)+1+len(w) > usageWidth && line != cont {
			lines = append(lines, line)
			line = cont
		}
		line += " " + w
	}
	return strings.Join(append(lines, line), "\n") + "\n"
}

// usageLine is a command's synopsis after "usage: " (or "Usage: ").
func usageLine(c command) string {
	const label = "usage: "
	return synopsisLines(c, strings.Repeat(" ", len(label)))[len(label):]
}

// synopsisWords splits a synopsis at the spaces outside brackets.
func synopsisWords(s string) []string {
	var words []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		case ' ':
			if depth == 0 {
				if i > start {
					words = append(words, s[start:i])
				}
				start = i + 1
			}
		}
	}
	if start < len(s) {
		words = append(words, s[start:])
	}
	return words
}

// indent is the synopses of cmds, each line after the prefix.
func indent(cmds []command, prefix string) string {
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString(synopsisLines(c, prefix))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// usageText is what postino help prints.
func usageText(all []command) string {
	return "postino: an SMTP relay with an outbox spool\n\nUsage:\n" + indent(all, "  ") + `

'postino COMMAND --help' describes a command and its flags, which may also stand before the
command's name (postino --admin ADDR queue list). The queue, batch, destinations, events, suppression and
health commands talk to a running relay's admin API: --admin ADDR, else the relay's own
admin.listen (from --config or POSTINO_CONFIG, or POSTINO_ADMIN), 127.0.0.1:8525 by default,
with the token the relay reads (admin.token_file or admin.token_env, or
POSTINO_ADMIN_TOKEN_FILE or POSTINO_ADMIN_TOKEN_ENV). SIGHUP makes serve reload its DKIM keys.
`
}

// printHelp prints a command's usage, what it does, and each of its flags.
func printHelp(w io.Writer, c command, fs *flag.FlagSet) {
	usageOf := usageLine(c)
	fmt.Fprintf(w, "Usage: %s%s.\n", usageOf, upperFirst(c.summary))
	var flags []string
	fs.VisitAll(func(f *flag.Flag) {
		value, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if value != "" {
			line += " " + valueName(usageOf, f.Name, value)
		}
		line += "\n      " + usage
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		flags = append(flags, line+"\n")
	})
	if len(flags) > 0 {
		fmt.Fprint(w, "\nFlags:\n"+strings.Join(flags, ""))
	}
}

// valueName is what the usage line calls a flag's value (--admin ADDR),
// so that the help says it the same way; else the flag's own, in capitals.
func valueName(usage, flag, value string) string {
	if _, after, ok := strings.Cut(usage, "--"+flag+" "); ok {
		if v := strings.FieldsFunc(after, func(r rune) bool { return r == ']' || unicode.IsSpace(r) }); len(v) > 0 && !strings.HasPrefix(v[0], "-") {
			return v[0]
		}
	}
	return strings.ToUpper(value)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func versionCmd(_ context.Context, inv *invocation) error {
	if _, err := inv.parseArgs(inv.flags()); err != nil {
		return err
	}
	_, err := fmt.Fprintln(inv.stdout, "postino", versionString())
	return err
}
