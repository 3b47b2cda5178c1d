package relay

import (
	"fmt"
	"log/slog"

	"github.com/genropy/postino/relay/intake"
	"github.com/genropy/postino/relay/submissions"
)

// SubmissionsConfig is one submissions table: where an app writes its mail
// in its own transactions, for the relay to take (relay/submissions).
type SubmissionsConfig struct {
	// Driver is postgres or mysql.
	Driver string `yaml:"driver"`
	// The DSN comes from exactly one of these: postgres://user@host/db, or
	// user:password@tcp(host:3306)/db.
	DSN string `yaml:"dsn"`
	// DSNFile holds the DSN, for a password kept out of the configuration.
	DSNFile string `yaml:"dsn_file"`
	// DSNEnv names the variable holding the DSN.
	DSNEnv string `yaml:"dsn_env"`
	// Table defaults to postino_submissions.
	Table string `yaml:"table"`
	// Name names the table in the messages' history and Received, the
	// readiness and the metrics; it defaults to driver:table, and must
	// be set where two entries would share that.
	Name string `yaml:"name"`
	// Poll is how often the table is read when no NOTIFY wakes the relay
	// (MySQL, or a lost LISTEN connection); default 1s.
	Poll Duration `yaml:"poll"`
}

// reader is the reader's configuration of s, with dsn, its defaults
// filled in.
func (s *SubmissionsConfig) reader(dsn string) submissions.Config {
	return submissions.Config{Name: s.Name, Driver: s.Driver, DSN: dsn, Table: s.Table, Poll: s.Poll.D()}.WithDefaults()
}

func (c *Config) checkSubmissions() error {
	named := map[string]int{}
	for i, s := range c.Submissions {
		rc := s.reader("")
		if j, ok := named[rc.Name]; ok {
			return fmt.Errorf("submissions[%d] and submissions[%d] are both named %q, which would mix up their readiness and metrics; give one a name", j, i, rc.Name)
		}
		named[rc.Name] = i
		if _, err := submissions.Schema(s.Driver, rc.Table); err != nil {
			return fmt.Errorf("submissions[%d]: %w", i, err)
		}
		if err := checkDSN(fmt.Sprintf("submissions[%d]", i), "", s.DSN, s.DSNFile, s.DSNEnv); err != nil {
			return err
		}
		if s.Poll < 0 {
			return fmt.Errorf("submissions[%d].poll %s is negative; leave it out for 1s", i, s.Poll.D())
		}
	}
	return nil
}

// openSubmissions connects to the submissions tables of the configuration,
// which the relay's intake takes mail from.
func (c *Config) openSubmissions(in *intake.Server, m *submissions.Metrics, getenv func(string) string, log *slog.Logger) ([]*submissions.Reader, error) {
	var out []*submissions.Reader
	for i, s := range c.Submissions {
		dsn, err := dsnOf(fmt.Sprintf("submissions[%d]", i), s.DSN, s.DSNFile, s.DSNEnv, getenv)
		if err != nil {
			closeAll(out)
			return nil, err
		}
		rd, err := submissions.Open(s.reader(dsn), in, m, log)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("submissions[%d]: %w", i, err)
		}
		out = append(out, rd)
	}
	return out, nil
}

func closeAll(readers []*submissions.Reader) {
	for _, rd := range readers {
		rd.Close()
	}
}
