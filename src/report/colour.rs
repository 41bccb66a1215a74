//! The colour scale of differing cells and heatmap cells: a relative
//! difference to a position on the scale ([`diff_scale`]), that position to
//! CSS colours (the reference's dark-theme scale, [`diff_colour`], and a
//! light-theme one, [`light_colour`]), and the per-page colour classes
//! (`Palette`).

use serde::Serialize;

/// Position of a relative difference on the report's colour scale:
/// `clamp((log10(rd) + 8) / 7, 0, 1)`; 0 at or below 1e-8, 1 at or above
/// 0.1; NaN counts as a full difference.
pub fn diff_scale(rd: f64) -> f64 {
    if rd.is_nan() {
        return 1.0;
    }
    if rd <= 1e-8 {
        return 0.0;
    }
    ((rd.log10() + 8.0) / 7.0).clamp(0.0, 1.0)
}

/// The integer colour components of one position on the colour scale.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Shade {
    /// Dark-theme text: `rgb(r,g,g)`.
    r: u8,
    g: u8,
    /// Background alpha in thousandths.
    alpha: u16,
    /// Light-theme text: `rgb(lr,lg,lg)`.
    lr: u8,
    lg: u8,
}

impl Shade {
    fn of(rd: f64) -> Shade {
        let t = diff_scale(rd);
        Shade {
            r: (220.0 + 28.0 * t).round() as u8,
            g: (220.0 - 140.0 * t).round() as u8,
            alpha: (150.0 * t).round() as u16,
            lr: (51.0 + 149.0 * t).round() as u8,
            lg: (51.0 - 21.0 * t).round() as u8,
        }
    }
    fn dark(self) -> String {
        format!("rgb({},{},{})", self.r, self.g, self.g)
    }
    fn background(self) -> String {
        format!(
            "rgba(248,80,80,{}.{:03})",
            self.alpha / 1000,
            self.alpha % 1000
        )
    }
    fn light(self) -> String {
        format!("rgb({},{},{})", self.lr, self.lg, self.lg)
    }
}

/// The colours of a differing cell, as the reference report: text from
/// `rgb(220,220,220)` to `rgb(248,80,80)` and background
/// `rgba(248,80,80, 0.15·t)`, where `t` is [`diff_scale`]`(rd)`.
/// Returns `(color, background)` as CSS values.
pub fn diff_colour(rd: f64) -> (String, String) {
    let s = Shade::of(rd);
    (s.dark(), s.background())
}

/// Text colour of a differing cell in the light theme (the reference's
/// colours are for a dark background): from `rgb(51,51,51)` to
/// `rgb(200,30,30)`.
pub fn light_colour(rd: f64) -> String {
    Shade::of(rd).light()
}

/// One colour class of a page: `.x{n}` with the colours [`diff_colour`]
/// and [`light_colour`] give its cells.
#[derive(Serialize)]
pub(crate) struct Colour {
    /// Text colour on the dark theme (the reference's scale).
    pub(crate) dark: String,
    /// Background (both themes).
    pub(crate) bg: String,
    /// Text colour on the light theme.
    pub(crate) light: String,
}

/// The colour classes used on one page. A differing cell names its class
/// (`x3`) instead of repeating an inline `style` (most cells of a diverging
/// page are coloured); the page's `<style>` holds one rule per distinct
/// colour, computed here, so every cell shows exactly its own colour.
#[derive(Default)]
pub(crate) struct Palette {
    ids: ahash::AHashMap<Shade, u32>,
}

impl Palette {
    /// The class number (from 1) of a cell with relative difference `rd`.
    pub(crate) fn class(&mut self, rd: f64) -> u32 {
        let n = self.ids.len() as u32 + 1;
        *self.ids.entry(Shade::of(rd)).or_insert(n)
    }
    /// The rules, for classes 1, 2, ...
    pub(crate) fn rules(self) -> Vec<Colour> {
        let mut v: Vec<(u32, Shade)> = self.ids.into_iter().map(|(s, i)| (i, s)).collect();
        v.sort_by_key(|(i, _)| *i);
        v.into_iter()
            .map(|(_, s)| Colour {
                dark: s.dark(),
                bg: s.background(),
                light: s.light(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_scale() {
        let grey = (
            "rgb(220,220,220)".to_string(),
            "rgba(248,80,80,0.000)".to_string(),
        );
        let red = (
            "rgb(248,80,80)".to_string(),
            "rgba(248,80,80,0.150)".to_string(),
        );
        assert_eq!(diff_colour(0.0), grey);
        assert_eq!(diff_colour(1e-8), grey);
        assert_eq!(diff_colour(-1.0), grey);
        assert_eq!(diff_colour(0.1), red);
        assert_eq!(diff_colour(1.0), red);
        assert_eq!(diff_colour(f64::NAN), red);
        assert_eq!(diff_colour(f64::INFINITY), red);
        // 1e-4: t = 4/7.
        let t: f64 = 4.0 / 7.0;
        let g = (220.0 - 140.0 * t).round() as u8;
        let r = (220.0 + 28.0 * t).round() as u8;
        assert_eq!(
            diff_colour(1e-4),
            (
                format!("rgb({r},{g},{g})"),
                format!("rgba(248,80,80,{:.3})", 0.15 * t)
            )
        );
        assert!((diff_scale(1e-4) - t).abs() < 1e-12);
    }
}
