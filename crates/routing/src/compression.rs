//! Response compression as a route asks for it: the content codings it may use (gzip, Brotli, zstd), off, or the proxy's default (`--compression`).

use serde::Serialize;

/// A content coding sluice can compress responses with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Coding {
    Gzip,
    #[serde(rename = "br")]
    Brotli,
    Zstd,
}

impl Coding {
    /// Every coding, the preferred first when a client accepts several equally: zstd, then
    /// Brotli, then gzip.
    pub const PREFERENCE: [Self; 3] = [Self::Zstd, Self::Brotli, Self::Gzip];

    /// The coding's name in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Brotli => "br",
            Self::Zstd => "zstd",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Self::Gzip => 1,
            Self::Brotli => 2,
            Self::Zstd => 4,
        }
    }
}

/// A set of codings; empty means no compression.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Codings(u8);

impl Codings {
    /// No coding: compression off.
    pub const NONE: Self = Self(0);
    /// gzip, Brotli and zstd.
    pub const ALL: Self = Self(7);

    /// Whether the set has `coding`.
    pub fn has(self, coding: Coding) -> bool {
        self.0 & coding.bit() != 0
    }

    /// Whether the set is empty (compression off).
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set with `coding` added.
    pub fn with(self, coding: Coding) -> Self {
        Self(self.0 | coding.bit())
    }

    /// The codings of the set, preferred first.
    pub fn iter(self) -> impl Iterator<Item = Coding> {
        Coding::PREFERENCE
            .into_iter()
            .filter(move |coding| self.has(*coding))
    }

    /// Reads `off`, or a comma list of `gzip`, `br` and `zstd` (case-insensitive, spaces
    /// allowed); anything else is an error that names the first unknown entry.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(Self::NONE);
        }
        let mut codings = Self::NONE;
        for entry in text.split(',').map(str::trim) {
            let coding = match entry.to_ascii_lowercase().as_str() {
                "gzip" => Coding::Gzip,
                "br" => Coding::Brotli,
                "zstd" => Coding::Zstd,
                "" => return Err(format!("{text:?} has an empty entry")),
                _ => {
                    return Err(format!(
                        "{entry:?} is not a coding sluice compresses with (gzip, br, zstd, or off)"
                    ))
                }
            };
            codings = codings.with(coding);
        }
        Ok(codings)
    }
}

impl std::fmt::Display for Codings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("off");
        }
        let names: Vec<&str> = self.iter().map(Coding::token).collect();
        f.write_str(&names.join(","))
    }
}

impl Serialize for Codings {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A route's response compression.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    /// The proxy's default (`--compression`): no annotation or middleware chose.
    #[default]
    Default,
    /// These codings (an empty set is off).
    Codings(Codings),
}

impl Compression {
    /// Whether the route leaves it to the proxy's default.
    pub fn is_default(&self) -> bool {
        *self == Self::Default
    }

    /// The codings the route uses, given the proxy's default.
    pub fn resolve(self, default: Codings) -> Codings {
        match self {
            Self::Default => default,
            Self::Codings(codings) => codings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_off_parse_and_unknown_codings_are_named() {
        let all = Codings::parse("gzip, BR,zstd").unwrap_or_default();
        assert_eq!(all, Codings::ALL);
        assert_eq!(all.to_string(), "zstd,br,gzip");
        assert_eq!(Codings::parse("off"), Ok(Codings::NONE));
        assert_eq!(
            Codings::parse("gzip").map(|c| c.to_string()).as_deref(),
            Ok("gzip")
        );
        let error = Codings::parse("gzip,deflate").unwrap_err();
        assert!(error.contains("\"deflate\""), "{error}");
        assert!(Codings::parse("gzip,,br").is_err());
        assert!(Codings::parse("").is_err());
    }
}
