package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/genropy/postino/internal/testrig/dnstest"
)

// dnsCmd serves the zone-file lines of -zone on a free port of 127.0.0.1
// (UDP and TCP), prints its IP:port, and serves until ctx ends.
func dnsCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dns", flag.ExitOnError)
	path := fs.String("zone", "", "`file` of zone-file lines, each with its owner's full name (d0.test. 300 IN MX 10 mx0.test.); blank lines and ; comments are skipped")
	fs.Parse(args)
	if *path == "" {
		return fmt.Errorf("give -zone FILE")
	}
	records, err := readZone(*path)
	if err != nil {
		return err
	}
	s := dnstest.Start(exitTB{}, dnstest.Zone{Records: records})
	fmt.Fprintln(out, s.Addr)
	<-ctx.Done()
	return nil
}

// readZone reads the records of a zone file, a line each.
func readZone(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var records []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, ";") {
			records = append(records, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("%s holds no record: give zone-file lines (d0.test. 300 IN MX 10 mx0.test.)", path)
	}
	return records, nil
}
