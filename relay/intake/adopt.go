package intake

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"

	"github.com/genropy/postino/backends"
)

// seedEnvelope works out the envelope of a row taken over from the seed
// layout, which kept the envelope in a JSON payload file beside the message
// rather than in the row: from that payload when the row names one, else
// from the message's own From, To, Cc and Bcc. A file that cannot be read
// is unreadable (tried again later); a message with no recipient to be
// found is an error that ends it, saying what was looked at.
func (w *Worker) seedEnvelope(m *backends.Message) (backends.Envelope, error) {
	env, err := w.messageEnvelope(m.EmlPath)
	if err != nil {
		return env, err
	}
	if m.PayloadPath != "" {
		p, err := w.payloadEnvelope(m.PayloadPath)
		if err != nil {
			return env, err
		}
		if len(p.Recipients) > 0 {
			env.Sender, env.Recipients = p.Sender, p.Recipients
		}
	}
	if len(env.Recipients) == 0 {
		return env, fmt.Errorf("taken over from the seed layout with no envelope, and neither its payload file %q nor the "+
			"message's To, Cc and Bcc name a recipient: send it again from the app, or cancel it (postino queue cancel)", m.PayloadPath)
	}
	env.SMTPUTF8 = !ASCIIAddresses(env.Sender, env.Recipients)
	env.ReceivedAt = time.Now().UTC()
	return env, nil
}

// messageEnvelope reads the sender and recipients from the message's
// headers, its size, and whether it holds 8-bit octets.
func (w *Worker) messageEnvelope(path string) (backends.Envelope, error) {
	var env backends.Envelope
	f, err := w.open(path)
	if err != nil {
		return env, err
	}
	defer f.Close()
	r := &counter{r: f}
	h, err := textproto.ReadHeader(bufio.NewReader(r))
	if err != nil {
		return env, fmt.Errorf("taken over from the seed layout with no envelope, and its header cannot be parsed: %w", err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return env, unreadable{err}
	}
	env.Size, env.EightBit = r.n, r.eightBit
	mh := mail.Header{Header: message.Header{Header: h}}
	if from, err := mh.AddressList("From"); err == nil && len(from) > 0 {
		env.Sender = from[0].Address
	}
	for _, k := range []string{"To", "Cc", "Bcc"} {
		list, _ := mh.AddressList(k) // a malformed field names nobody
		for _, a := range list {
			env.Recipients = append(env.Recipients, a.Address)
		}
	}
	return env, nil
}

// counter counts the octets read through it and notes any above 127.
type counter struct {
	r        io.Reader
	n        int64
	eightBit bool
}

func (s *counter) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	if !s.eightBit && !isASCII(p[:n]) {
		s.eightBit = true
	}
	return n, err
}

// seedPayload is what the envelope fields of a seed payload file may look
// like: the app wrote it, so each field is a string of addresses, a list of
// them, or a list of objects with an address.
type seedPayload struct {
	From       addresses `json:"from"`
	Sender     addresses `json:"sender"`
	To         addresses `json:"to"`
	Cc         addresses `json:"cc"`
	Bcc        addresses `json:"bcc"`
	Recipients addresses `json:"recipients"`
}

func (w *Worker) payloadEnvelope(path string) (backends.Envelope, error) {
	var env backends.Envelope
	f, err := w.open(path)
	if err != nil {
		return env, err
	}
	defer f.Close()
	var p seedPayload
	if err := json.NewDecoder(f).Decode(&p); err != nil {
		return env, fmt.Errorf("taken over from the seed layout with no envelope, and its payload file %s is not the JSON "+
			"expected (from, to, cc, bcc): %w", path, err)
	}
	env.Sender = first(p.Sender, p.From)
	for _, list := range []addresses{p.Recipients, p.To, p.Cc, p.Bcc} {
		env.Recipients = append(env.Recipients, list...)
	}
	return env, nil
}

func first(lists ...addresses) string {
	for _, l := range lists {
		if len(l) > 0 {
			return l[0]
		}
	}
	return ""
}

// addresses is a list of bare addresses read from a seed payload field.
type addresses []string

func (a *addresses) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		return a.add(one)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return errors.New("an address field is neither a string nor a list")
	}
	for _, it := range items {
		var s string
		var obj struct{ Email, Address string }
		switch {
		case json.Unmarshal(it, &s) == nil:
		case json.Unmarshal(it, &obj) == nil:
			s = obj.Email + obj.Address
		default:
			return fmt.Errorf("address %s is neither a string nor an object with an email or address", it)
		}
		if err := a.add(s); err != nil {
			return err
		}
	}
	return nil
}

func (a *addresses) add(s string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	list, err := mail.ParseAddressList(s)
	if err != nil {
		return fmt.Errorf("address %q: %w", s, err)
	}
	for _, x := range list {
		*a = append(*a, x.Address)
	}
	return nil
}
