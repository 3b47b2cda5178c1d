package intake

import (
	"errors"
	"fmt"

	"github.com/emersion/go-smtp"
)

// Refusal is why intake does not take a message, as its sender is told: for
// good (Permanent: a fault of the message, a 5xx reply) or for now (4xx).
// Take and CheckEnvelope return it; the SMTP session turns it into its
// reply, the submissions reader into a refused row.
type Refusal struct {
	Code         int
	EnhancedCode smtp.EnhancedCode
	Message      string
	// cause is the relay's own failure behind a temporary refusal (its
	// spool, its outbox): it names paths and servers of this machine, so
	// it goes to the log, never to the sender.
	cause error
}

func refusal(code int, enhanced smtp.EnhancedCode, format string, args ...any) *Refusal {
	return &Refusal{Code: code, EnhancedCode: enhanced, Message: oneLine(fmt.Sprintf(format, args...))}
}

// tempFailure refuses a message for now because the relay failed: the
// sender is told what failed and to try again later.
func tempFailure(what string, cause error) *Refusal {
	return &Refusal{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: what + ", try again later", cause: cause}
}

func (r *Refusal) Error() string {
	s := fmt.Sprintf("%d %d.%d.%d %s", r.Code, r.EnhancedCode[0], r.EnhancedCode[1], r.EnhancedCode[2], r.Message)
	if r.cause != nil {
		s += ": " + r.cause.Error()
	}
	return s
}

func (r *Refusal) Unwrap() error { return r.cause }

// Permanent says that the message is refused for good: handing it over
// again will not help.
func (r *Refusal) Permanent() bool { return r.Code/100 == 5 }

// reply is the refusal as the SMTP session answers it.
func (r *Refusal) reply() *smtp.SMTPError {
	return &smtp.SMTPError{Code: r.Code, EnhancedCode: r.EnhancedCode, Message: r.Message}
}

// asReply is err as a session method returns it to go-smtp, which answers
// an *smtp.SMTPError as it is.
func asReply(err error) error {
	if r, ok := errors.AsType[*Refusal](err); ok {
		return r.reply()
	}
	return err
}
