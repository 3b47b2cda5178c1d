// Command memo is a small app that writes its mail the transactional way:
// creating a memo inserts the memo and its email submission in one
// PostgreSQL transaction, and Postino, reading the submissions table
// (docs/submissions.md), sends the mail once the
// transaction commits, and only then. A memo rolled back sends nothing.
//
//	memo -dsn postgres://memo:memo@localhost:5432/memo -listen :8080
//	curl -d title=Budget -d to=team@example.com localhost:8080/memos
//
// With -every it also creates a memo at that interval, as the compose demo
// does (contrib/compose).
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/mail"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// schema is the app's own table; postino submissions migrate makes the
// submissions table beside it.
const schema = `CREATE TABLE IF NOT EXISTS memos (
    id         uuid PRIMARY KEY,
    title      text NOT NULL,
    recipient  text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)`

func main() {
	dsn := flag.String("dsn", os.Getenv("MEMO_DSN"), "the app's PostgreSQL `DSN` (default: MEMO_DSN)")
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP `address` of POST /memos")
	from := flag.String("from", "memos@example.com", "the memos' sender `address`")
	every := flag.Duration("every", 0, "also create a memo to -to at this `interval`")
	to := flag.String("to", "team@example.com", "the recipient of the memos -every creates")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*dsn, *listen, *from, *every, *to, log); err != nil {
		log.Error("memo stopped", "error", err)
		os.Exit(1)
	}
}

func run(dsn, listen, from string, every time.Duration, to string, log *slog.Logger) error {
	if dsn == "" {
		return errors.New("give the database with -dsn or MEMO_DSN")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create the memos table: %w", err)
	}
	app := &app{db: db, from: from, log: log}
	if every > 0 {
		go app.loop(ctx, every, to)
	}
	srv := &http.Server{Addr: listen, Handler: app.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	log.Info("memo serving", "listen", listen)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type app struct {
	db   *sql.DB
	from string
	log  *slog.Logger
}

func (a *app) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /memos", func(w http.ResponseWriter, r *http.Request) {
		title, to := r.FormValue("title"), r.FormValue("to")
		if title == "" {
			http.Error(w, "give the memo a title", http.StatusBadRequest)
			return
		}
		if _, err := mail.ParseAddress(to); err != nil {
			http.Error(w, "to: give the recipient's address", http.StatusBadRequest)
			return
		}
		id, err := a.createMemo(r.Context(), title, to)
		if err != nil {
			a.log.Error("memo not created", "error", err)
			http.Error(w, "the memo was not created", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "memo %s created, and its mail with it\n", id)
	})
	return mux
}

// loop creates a memo to `to` at each interval, until ctx ends.
func (a *app) loop(ctx context.Context, every time.Duration, to string) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		id, err := a.createMemo(ctx, "Memo of "+time.Now().UTC().Format(time.RFC3339), to)
		if err != nil {
			a.log.Error("memo not created", "error", err)
		} else {
			a.log.Info("memo created, and its mail with it", "memo", id)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// createMemo inserts the memo and its email in one transaction: both
// commit, or neither. The submission's id, the memo's, is the message's
// X-Genro-Mail-ID, by which the app finds it in Postino (postino queue
// show ID) and its plugins tell the outcome.
func (a *app) createMemo(ctx context.Context, title, to string) (string, error) {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	id := uuid.NewString()
	if _, err := tx.ExecContext(ctx, `INSERT INTO memos (id, title, recipient) VALUES ($1, $2, $3)`, id, title, to); err != nil {
		return "", fmt.Errorf("insert the memo: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO postino_submissions (id, mail_from, rcpt_to, subject, text_body, html_body)
VALUES ($1, $2, $3, $4, $5, $6)`,
		id, a.from, []string{to}, "New memo: "+title,
		"A memo was created: "+title+"\n",
		"<p>A memo was created: <b>"+html.EscapeString(title)+"</b></p>"); err != nil {
		return "", fmt.Errorf("insert the memo's email: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("commit: %w", err)
	}
	return id, nil
}
