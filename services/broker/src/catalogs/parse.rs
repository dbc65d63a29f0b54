//! The two reference-catalog files, recognised from their header: the
//! Hipparcos-2 subset (comma-separated, positions at J1991.25 with proper
//! motions) and the OpenNGC galaxy subset (semicolon-separated, sexagesimal
//! J2000 positions, sizes, redshifts). Errors name the line.

use crate::sky;

/// Julian year of Hipparcos positions.
pub const HIPPARCOS_EPOCH: f64 = 1991.25;
/// Julian year of OpenNGC positions.
pub const J2000: f64 = 2000.0;

/// A catalog this broker knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Catalog {
    Hipparcos2,
    OpenNgc,
}

impl Catalog {
    pub const ALL: [Catalog; 2] = [Catalog::Hipparcos2, Catalog::OpenNgc];

    pub fn as_str(self) -> &'static str {
        match self {
            Catalog::Hipparcos2 => "hipparcos2",
            Catalog::OpenNgc => "openngc",
        }
    }

    pub fn parse(name: &str) -> Option<Catalog> {
        Catalog::ALL
            .into_iter()
            .find(|c| c.as_str() == name.trim().to_ascii_lowercase())
    }
}

/// One catalog source, ready to store.
#[derive(Clone, Debug, Default, PartialEq, sqlx::FromRow)]
pub struct SourceRow {
    pub catalog: String,
    pub source_id: String,
    pub ra: f64,
    pub dec: f64,
    pub hpx: i64,
    /// Julian year of `ra`/`dec`.
    pub epoch: f64,
    /// mas/yr, pmRA including cos dec.
    pub pm_ra: Option<f64>,
    pub pm_dec: Option<f64>,
    pub parallax: Option<f64>,
    pub mag: Option<f64>,
    pub mag_band: Option<String>,
    pub kind: Option<String>,
    pub morphology: Option<String>,
    pub major_axis: Option<f64>,
    pub minor_axis: Option<f64>,
    pub redshift: Option<f64>,
    pub radial_velocity: Option<f64>,
    pub names: Option<String>,
    pub b_v: Option<f64>,
}

/// A file that is neither catalog, or a bad line in one.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParseError {
    #[error(
        "the header matches neither the Hipparcos-2 (HIP,ra_deg,dec_deg,…) nor the OpenNGC (Name;Type;RA;Dec;…) file"
    )]
    UnknownHeader,
    #[error("the file is not UTF-8 text")]
    NotText,
    #[error("line {line}: {problem}")]
    Line { line: usize, problem: String },
    #[error("the file holds no sources")]
    Empty,
}

/// Parse a catalog file.
pub fn parse(bytes: &[u8]) -> Result<(Catalog, Vec<SourceRow>), ParseError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError::NotText)?;
    let text = text.trim_start_matches('\u{feff}');
    let mut lines = text.lines();
    let header = lines.next().ok_or(ParseError::Empty)?;
    let (catalog, rows) = if header.starts_with("HIP,ra_deg,dec_deg,") {
        (Catalog::Hipparcos2, hipparcos(header, lines)?)
    } else if header.starts_with("Name;Type;RA;Dec;") {
        (Catalog::OpenNgc, openngc(header, lines)?)
    } else {
        return Err(ParseError::UnknownHeader);
    };
    if rows.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok((catalog, rows))
}

struct Columns<'a> {
    names: Vec<&'a str>,
}

impl<'a> Columns<'a> {
    fn index(&self, name: &str) -> Result<usize, ParseError> {
        self.names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| ParseError::Line {
                line: 1,
                problem: format!("the header has no {name} column"),
            })
    }
}

fn opt_f64(field: &str, name: &str, line: usize) -> Result<Option<f64>, ParseError> {
    let field = field.trim();
    if field.is_empty() {
        return Ok(None);
    }
    field
        .parse::<f64>()
        .map(Some)
        .map_err(|_| ParseError::Line {
            line,
            problem: format!("{name}: {field:?} is not a number"),
        })
}

fn req_f64(field: &str, name: &str, line: usize) -> Result<f64, ParseError> {
    opt_f64(field, name, line)?.ok_or_else(|| ParseError::Line {
        line,
        problem: format!("{name}: missing"),
    })
}

fn hipparcos<'a>(
    header: &'a str,
    lines: impl Iterator<Item = &'a str>,
) -> Result<Vec<SourceRow>, ParseError> {
    let cols = Columns {
        names: header.split(',').collect(),
    };
    let [hip, ra, dec, plx, pm_ra, pm_dec, hp, bv] = [
        "HIP", "ra_deg", "dec_deg", "Plx", "pmRA", "pmDE", "Hpmag", "B-V",
    ]
    .map(|c| cols.index(c));
    let (hip, ra, dec, plx, pm_ra, pm_dec, hp, bv) =
        (hip?, ra?, dec?, plx?, pm_ra?, pm_dec?, hp?, bv?);
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != cols.names.len() {
            return Err(ParseError::Line {
                line: n,
                problem: format!("{} fields, the header has {}", f.len(), cols.names.len()),
            });
        }
        let id = f[hip].trim();
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ParseError::Line {
                line: n,
                problem: format!("HIP: {id:?} is not a number"),
            });
        }
        let (ra_deg, dec_deg) = position(
            req_f64(f[ra], "ra_deg", n)?,
            req_f64(f[dec], "dec_deg", n)?,
            n,
        )?;
        rows.push(SourceRow {
            catalog: Catalog::Hipparcos2.as_str().to_owned(),
            source_id: format!("HIP {id}"),
            ra: ra_deg,
            dec: dec_deg,
            hpx: sky::hpx(ra_deg, dec_deg),
            epoch: HIPPARCOS_EPOCH,
            pm_ra: opt_f64(f[pm_ra], "pmRA", n)?,
            pm_dec: opt_f64(f[pm_dec], "pmDE", n)?,
            parallax: opt_f64(f[plx], "Plx", n)?,
            mag: opt_f64(f[hp], "Hpmag", n)?,
            mag_band: Some("Hp".to_owned()),
            kind: Some("star".to_owned()),
            b_v: opt_f64(f[bv], "B-V", n)?,
            ..SourceRow::default()
        });
    }
    Ok(rows)
}

fn position(ra: f64, dec: f64, line: usize) -> Result<(f64, f64), ParseError> {
    if !(0.0..360.0).contains(&ra) || !(-90.0..=90.0).contains(&dec) {
        return Err(ParseError::Line {
            line,
            problem: format!("position ({ra}, {dec}) is off the sky"),
        });
    }
    Ok((ra, dec))
}

/// Split a `;`-separated line whose fields may be wrapped in double quotes
/// (a doubled quote inside is one quote).
fn split_semicolons(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ';' if !quoted => fields.push(std::mem::take(&mut field)),
            other => field.push(other),
        }
    }
    fields.push(field);
    fields
}

/// `HH:MM:SS.ss` to degrees.
fn sexagesimal_ra(s: &str, line: usize) -> Result<f64, ParseError> {
    let parts: Vec<f64> = s
        .split(':')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad(line, "RA", s))?;
    match parts.as_slice() {
        [h, m, sec] => Ok(15.0 * (h + m / 60.0 + sec / 3600.0)),
        _ => Err(bad(line, "RA", s)),
    }
}

/// `±DD:MM:SS.s` to degrees.
fn sexagesimal_dec(s: &str, line: usize) -> Result<f64, ParseError> {
    let s = s.trim();
    let negative = s.starts_with('-');
    let parts: Vec<f64> = s
        .trim_start_matches(['+', '-'])
        .split(':')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad(line, "Dec", s))?;
    match parts.as_slice() {
        [d, m, sec] => {
            let v = d + m / 60.0 + sec / 3600.0;
            Ok(if negative { -v } else { v })
        }
        _ => Err(bad(line, "Dec", s)),
    }
}

fn bad(line: usize, name: &str, value: &str) -> ParseError {
    ParseError::Line {
        line,
        problem: format!("{name}: {value:?} is not sexagesimal"),
    }
}

fn openngc<'a>(
    header: &'a str,
    lines: impl Iterator<Item = &'a str>,
) -> Result<Vec<SourceRow>, ParseError> {
    let cols = Columns {
        names: header.split(';').collect(),
    };
    let idx = |c: &str| cols.index(c);
    let (name, kind, ra, dec) = (idx("Name")?, idx("Type")?, idx("RA")?, idx("Dec")?);
    let (maj, min, bmag, vmag) = (idx("MajAx")?, idx("MinAx")?, idx("B-Mag")?, idx("V-Mag")?);
    let (hubble, radvel, z) = (idx("Hubble")?, idx("RadVel")?, idx("Redshift")?);
    let (messier, ids, common) = (idx("M")?, idx("Identifiers")?, idx("Common names")?);
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        if line.trim().is_empty() {
            continue;
        }
        let f = split_semicolons(line);
        if f.len() != cols.names.len() {
            return Err(ParseError::Line {
                line: n,
                problem: format!("{} fields, the header has {}", f.len(), cols.names.len()),
            });
        }
        let id = f[name].trim();
        if id.is_empty() {
            return Err(ParseError::Line {
                line: n,
                problem: "Name: missing".to_owned(),
            });
        }
        let (ra_deg, dec_deg) =
            position(sexagesimal_ra(&f[ra], n)?, sexagesimal_dec(&f[dec], n)?, n)?;
        let (mag, band) = match (
            opt_f64(&f[bmag], "B-Mag", n)?,
            opt_f64(&f[vmag], "V-Mag", n)?,
        ) {
            (Some(b), _) => (Some(b), Some("B")),
            (None, Some(v)) => (Some(v), Some("V")),
            _ => (None, None),
        };
        let mut names: Vec<String> = Vec::new();
        if !f[messier].trim().is_empty() {
            names.push(format!("M{}", f[messier].trim().trim_start_matches('0')));
        }
        for extra in [&f[common], &f[ids]] {
            if !extra.trim().is_empty() {
                names.push(extra.trim().to_owned());
            }
        }
        let non_empty = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_owned());
        rows.push(SourceRow {
            catalog: Catalog::OpenNgc.as_str().to_owned(),
            source_id: id.to_owned(),
            ra: ra_deg,
            dec: dec_deg,
            hpx: sky::hpx(ra_deg, dec_deg),
            epoch: J2000,
            mag,
            mag_band: band.map(str::to_owned),
            kind: non_empty(&f[kind]),
            morphology: non_empty(&f[hubble]),
            major_axis: opt_f64(&f[maj], "MajAx", n)?,
            minor_axis: opt_f64(&f[min], "MinAx", n)?,
            redshift: opt_f64(&f[z], "Redshift", n)?,
            radial_velocity: opt_f64(&f[radvel], "RadVel", n)?,
            names: (!names.is_empty()).then(|| names.join("; ")),
            ..SourceRow::default()
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_formats_and_names_bad_lines() {
        let hip = "HIP,ra_deg,dec_deg,Plx,pmRA,pmDE,Hpmag,B-V\n88,0.26915945,-48.80985914,5.50,-18.36,-5.82,5.8690,0.911\n";
        let (cat, rows) = parse(hip.as_bytes()).expect("hipparcos");
        assert_eq!(cat, Catalog::Hipparcos2);
        assert_eq!(rows[0].source_id, "HIP 88");
        assert_eq!(rows[0].pm_ra, Some(-18.36));
        let ngc = "Name;Type;RA;Dec;MajAx;MinAx;B-Mag;V-Mag;Hubble;RadVel;Redshift;M;Identifiers;Common names;NED notes\n\
                   NGC4993;G;13:09:47.70;-23:23:02.0;1.55;1.35;13.45;;E-S0;2920;0.009787;;PGC 045657;;\"a; b \"\"c\"\"\"\n";
        let (cat, rows) = parse(ngc.as_bytes()).expect("openngc");
        assert_eq!(cat, Catalog::OpenNgc);
        assert!((rows[0].ra - 197.448_75).abs() < 1e-9);
        assert!((rows[0].dec - -23.383_888_9).abs() < 1e-6);
        assert_eq!(rows[0].redshift, Some(0.009787));
        let broken = "HIP,ra_deg,dec_deg,Plx,pmRA,pmDE,Hpmag,B-V\n88,abc,-48.8,5.50,-18.36,-5.82,5.8690,0.911\n";
        assert!(matches!(
            parse(broken.as_bytes()),
            Err(ParseError::Line { line: 2, .. })
        ));
        assert_eq!(parse(b"a,b\n1,2\n"), Err(ParseError::UnknownHeader));
    }
}
