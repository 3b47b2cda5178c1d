package pec

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"time"

	"github.com/emersion/go-message/charset"
)

// postacert mirrors the DTD of daticert.xml in the annex to DM 2 novembre
// 2005 (RFC 6109, section 4.4).
type postacert struct {
	XMLName      xml.Name `xml:"postacert"`
	Tipo         string   `xml:"tipo,attr"`
	Errore       string   `xml:"errore,attr"`
	Intestazione struct {
		Mittente    string `xml:"mittente"`
		Destinatari []struct {
			Tipo    string `xml:"tipo,attr"`
			Address string `xml:",chardata"`
		} `xml:"destinatari"`
		Risposte string `xml:"risposte"`
		Oggetto  string `xml:"oggetto"`
	} `xml:"intestazione"`
	Dati struct {
		GestoreEmittente string `xml:"gestore-emittente"`
		Data             struct {
			Zona   string `xml:"zona,attr"`
			Giorno string `xml:"giorno"`
			Ora    string `xml:"ora"`
		} `xml:"data"`
		Identificativo string `xml:"identificativo"`
		MsgID          string `xml:"msgid"`
		Ricevuta       struct {
			Tipo string `xml:"tipo,attr"`
		} `xml:"ricevuta"`
		Consegna     string `xml:"consegna"`
		Ricezione    string `xml:"ricezione"`
		ErroreEsteso string `xml:"errore-esteso"`
	} `xml:"dati"`
}

// parseDaticert reads daticert.xml. utf8 says the MIME layer already
// converted the bytes to UTF-8, whatever the XML declaration says.
func parseDaticert(b []byte, utf8 bool) (*Daticert, error) {
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.CharsetReader = func(label string, r io.Reader) (io.Reader, error) {
		if utf8 {
			return r, nil
		}
		return charset.Reader(label, r)
	}
	var x postacert
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}

	d := &Daticert{
		Tipo:             lowerTrim(x.Tipo),
		Errore:           lowerTrim(x.Errore),
		Mittente:         strings.TrimSpace(x.Intestazione.Mittente),
		Risposte:         strings.TrimSpace(x.Intestazione.Risposte),
		Oggetto:          strings.TrimSpace(x.Intestazione.Oggetto),
		GestoreEmittente: strings.TrimSpace(x.Dati.GestoreEmittente),
		Identificativo:   stripAngles(x.Dati.Identificativo),
		MsgID:            stripAngles(x.Dati.MsgID),
		Ricevuta:         lowerTrim(x.Dati.Ricevuta.Tipo),
		Consegna:         strings.TrimSpace(x.Dati.Consegna),
		Ricezione:        strings.TrimSpace(x.Dati.Ricezione),
		ErroreEsteso:     strings.TrimSpace(x.Dati.ErroreEsteso),
	}
	for _, dest := range x.Intestazione.Destinatari {
		if addr := strings.TrimSpace(dest.Address); addr != "" {
			d.Destinatari = append(d.Destinatari, Recipient{Address: addr, Type: lowerTrim(dest.Tipo)})
		}
	}
	// A date that does not parse leaves Data zero: the rest of the
	// certificate is still worth having.
	d.Data, _ = parseData(x.Dati.Data.Giorno, x.Dati.Data.Ora, x.Dati.Data.Zona)
	return d, nil
}

// parseData joins giorno (dd/mm/yyyy), ora (hh:mm:ss) and zona (+hhmm)
// into one time with its offset.
func parseData(giorno, ora, zona string) (time.Time, error) {
	giorno, ora, zona = strings.TrimSpace(giorno), strings.TrimSpace(ora), strings.TrimSpace(zona)
	if strings.Count(ora, ":") == 1 {
		ora += ":00"
	}
	layout := "2/1/2006 15:04:05 -0700"
	if strings.Contains(zona, ":") {
		layout = "2/1/2006 15:04:05 -07:00"
	}
	return time.Parse(layout, giorno+" "+ora+" "+zona)
}

func lowerTrim(s string) string {
	return strings.ToLower(strings.TrimSpace(s))
}

// daticertFields names the fields d carries, as Receipt.Fields names them.
func daticertFields(d *Daticert) map[string]bool {
	if d == nil {
		return nil
	}
	m := map[string]bool{
		"tipo":              d.Tipo != "",
		"errore":            d.Errore != "",
		"mittente":          d.Mittente != "",
		"destinatari":       len(d.Destinatari) > 0,
		"risposte":          d.Risposte != "",
		"oggetto":           d.Oggetto != "",
		"gestore_emittente": d.GestoreEmittente != "",
		"data":              !d.Data.IsZero(),
		"msgid":             d.MsgID != "",
		"ricevuta":          d.Ricevuta != "",
		"consegna":          d.Consegna != "",
		"ricezione":         d.Ricezione != "",
		"errore_esteso":     d.ErroreEsteso != "",
	}
	for k, present := range m {
		if !present {
			delete(m, k)
		}
	}
	return m
}
