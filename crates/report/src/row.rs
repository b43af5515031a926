//! CSV rows written without the formatting machinery a field.
//!
//! `requests.csv` gets a row per request, `timeseries.csv` a row per engine
//! core per simulated second and `links.csv` a row per link per second: a
//! long run writes millions. Through `write!` and `csv::Writer::write_field`
//! a `requests.csv` row of 35 fields cost about 20,000 instructions
//! (callgrind, 1P3D at 20,000 requests: 7 % of the whole run), most of it
//! `core::fmt` dispatch and the writer's byte-by-byte quoting scan of
//! fields that are digits. Here counts are written with `itoa`, the
//! millisecond fields by integer arithmetic, and only text is checked for
//! quoting, so a row costs a few thousand.
//!
//! The bytes are those `csv::Writer` writes with its default settings
//! (comma, `"` doubled inside quotes, `QuoteStyle::Necessary`, records
//! ended by `\n`): a field is quoted when it holds a comma, a quote, `\r`
//! or `\n` (csv-core's `requires_quotes` for the terminator `Any(b'\n')`),
//! and a record whose only field is empty is written as `""` (csv-core's
//! `Writer::terminator`). A property test checks both writers agree.

use std::io::{self, BufWriter, Write};

/// One CSV field of a row written by [`RowWriter::cells`].
pub(crate) enum Cell<'a> {
    Int(u64),
    /// A number with this many decimals (`{:.N}`).
    Fixed(f64, usize),
    Text(&'a str),
}

/// A CSV file written row by row through one reused line buffer.
pub(crate) struct RowWriter<W: Write> {
    out: BufWriter<W>,
    line: Vec<u8>,
    /// Fields in the row being built.
    fields: u32,
}

impl<W: Write> RowWriter<W> {
    /// A writer whose first row is `header`.
    pub fn new(out: W, header: &[&str]) -> io::Result<RowWriter<W>> {
        let mut w = RowWriter {
            out: BufWriter::new(out),
            line: Vec::with_capacity(512),
            fields: 0,
        };
        for name in header {
            w.text(name);
        }
        w.end_row()?;
        Ok(w)
    }

    fn separate(&mut self) {
        if self.fields > 0 {
            self.line.push(b',');
        }
        self.fields += 1;
    }

    /// A count.
    pub fn int(&mut self, n: u64) {
        self.separate();
        self.line
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }

    /// Counts joined by `/` (an engine's `pool/pod/rank`).
    pub fn path(&mut self, parts: &[u64]) {
        self.separate();
        for (i, n) in parts.iter().enumerate() {
            if i > 0 {
                self.line.push(b'/');
            }
            self.line
                .extend_from_slice(itoa::Buffer::new().format(*n).as_bytes());
        }
    }

    /// Nanoseconds as milliseconds with three decimals (`{ms}.{µs:03}`,
    /// truncated to the microsecond); an empty field for `None`.
    pub fn ms(&mut self, ns: Option<u64>) {
        self.separate();
        if let Some(ns) = ns {
            self.line
                .extend_from_slice(itoa::Buffer::new().format(ns / 1_000_000).as_bytes());
            let micros = ((ns / 1_000) % 1_000) as u16;
            self.line.extend_from_slice(&[
                b'.',
                b'0' + (micros / 100) as u8,
                b'0' + (micros / 10 % 10) as u8,
                b'0' + (micros % 10) as u8,
            ]);
        }
    }

    /// A number with `decimals` decimals, as `{x:.decimals$}` prints it:
    /// floats keep `core::fmt`, whose exact rounding is what the files have
    /// always held.
    pub fn fixed(&mut self, x: f64, decimals: usize) {
        self.separate();
        // Writing into a Vec cannot fail.
        let _ = write!(self.line, "{x:.decimals$}");
    }

    /// A text, quoted when csv would quote it.
    pub fn text(&mut self, t: &str) {
        self.separate();
        let bytes = t.as_bytes();
        if bytes
            .iter()
            .any(|b| matches!(b, b',' | b'"' | b'\r' | b'\n'))
        {
            self.line.push(b'"');
            for &b in bytes {
                if b == b'"' {
                    self.line.push(b'"');
                }
                self.line.push(b);
            }
            self.line.push(b'"');
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    /// An empty field.
    pub fn empty(&mut self) {
        self.separate();
    }

    /// Writes each of `row`'s cells, then ends the row.
    pub fn cells(&mut self, row: &[Cell]) -> io::Result<()> {
        for cell in row {
            match *cell {
                Cell::Int(n) => self.int(n),
                Cell::Fixed(x, decimals) => self.fixed(x, decimals),
                Cell::Text(t) => self.text(t),
            }
        }
        self.end_row()
    }

    /// Ends the row being built and hands it to the buffered writer.
    pub fn end_row(&mut self) -> io::Result<()> {
        if self.line.is_empty() {
            // csv writes a record with no bytes as one empty quoted field,
            // so that it reads back as a record rather than a blank line.
            self.line.extend_from_slice(b"\"\"");
        }
        self.line.push(b'\n');
        let result = self.out.write_all(&self.line);
        self.line.clear();
        self.fields = 0;
        result
    }

    /// Flushes and returns the inner writer.
    pub fn finish(self) -> io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `csv::Writer` writes for the same fields, each given as text.
    fn by_csv(rows: &[Vec<String>]) -> Vec<u8> {
        let mut w = csv::WriterBuilder::new()
            .flexible(true)
            .from_writer(Vec::new());
        for row in rows {
            w.write_record(row).unwrap();
        }
        w.into_inner().unwrap()
    }

    #[derive(Clone, Debug)]
    enum F {
        Int(u64),
        Ms(Option<u64>),
        Fixed(f64, usize),
        Text(String),
    }

    impl F {
        fn as_text(&self) -> String {
            match self {
                F::Int(n) => n.to_string(),
                F::Ms(Some(ns)) => format!("{}.{:03}", ns / 1_000_000, (ns / 1_000) % 1_000),
                F::Ms(None) => String::new(),
                F::Fixed(x, d) => format!("{x:.d$}"),
                F::Text(t) => t.clone(),
            }
        }
    }

    fn field() -> impl Strategy<Value = F> {
        prop_oneof![
            any::<u64>().prop_map(F::Int),
            proptest::option::of(any::<u64>()).prop_map(F::Ms),
            (any::<f64>(), 0usize..8).prop_map(|(x, d)| F::Fixed(x, d)),
            "[a-z,\"\r\n #\\-]{0,6}".prop_map(F::Text),
        ]
    }

    proptest! {
        /// Every row, the header included, is byte for byte what
        /// `csv::Writer` writes for the same fields.
        #[test]
        fn rows_are_what_csv_writes(rows in proptest::collection::vec(proptest::collection::vec(field(), 0..6), 0..5)) {
            let mut w = RowWriter::new(Vec::new(), &["a", "b,c", ""]).unwrap();
            for row in &rows {
                for f in row {
                    match f {
                        F::Int(n) => w.int(*n),
                        F::Ms(ns) => w.ms(*ns),
                        F::Fixed(x, d) => w.fixed(*x, *d),
                        F::Text(t) => w.text(t),
                    }
                }
                w.end_row().unwrap();
            }
            let mut expected: Vec<Vec<String>> = vec![vec!["a".into(), "b,c".into(), String::new()]];
            expected.extend(rows.iter().map(|r| r.iter().map(F::as_text).collect()));
            prop_assert_eq!(w.finish().unwrap(), by_csv(&expected));
        }
    }

    #[test]
    fn a_row_is_written_as_its_fields_formatted_one_by_one() {
        let mut w = RowWriter::new(Vec::new(), &["n", "link"]).unwrap();
        let rows: [&[Cell]; 2] = [
            &[
                Cell::Int(u64::MAX),
                Cell::Fixed(2.5, 0),
                Cell::Fixed(0.123456789, 4),
                Cell::Fixed(1.0, 6),
                Cell::Text("nic-out"),
            ],
            &[
                Cell::Int(0),
                Cell::Text("a,b"),
                Cell::Fixed(-0.00004, 4),
                Cell::Int(7),
                Cell::Text(""),
            ],
        ];
        for row in rows {
            w.cells(row).unwrap();
        }
        w.path(&[1, 20, 3]);
        w.ms(Some(12_345_678_901));
        w.ms(Some(999));
        w.ms(None);
        w.end_row().unwrap();
        let out = String::from_utf8(w.finish().unwrap()).unwrap();
        assert_eq!(
            out,
            format!(
                "n,link\n{},{:.0},0.1235,1.000000,nic-out\n0,\"a,b\",-0.0000,7,\n1/20/3,12345.678,0.000,\n",
                u64::MAX,
                2.5
            )
        );
    }

    #[test]
    fn a_row_of_one_empty_field_is_quoted_as_csv_quotes_it() {
        let mut w = RowWriter::new(Vec::new(), &["x"]).unwrap();
        w.empty();
        w.end_row().unwrap();
        w.text("say \"hi\", then\nleave");
        w.empty();
        w.end_row().unwrap();
        let out = String::from_utf8(w.finish().unwrap()).unwrap();
        assert_eq!(out, "x\n\"\"\n\"say \"\"hi\"\", then\nleave\",\n");
    }
}
