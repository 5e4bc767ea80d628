//! `mesh decide learn eval --plot FILE`: the reliability diagrams of term.fits at every level
//! and of the winners' p (L0 and the winner head, on a split set's sealed part too), and the
//! accuracy–coverage curve, side by side, as SVG (drawn with plotters; no fonts or bitmaps).

use std::path::Path;

use plotters::prelude::*;

use super::eval::{Bin, EvalReport};

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error(
        "{0}: the plot is drawn as SVG only; name the file .svg (a browser or any image viewer shows it)"
    )]
    NotSvg(String),
    #[error("cannot draw the plot into {file}: {why}")]
    Draw { file: String, why: String },
}

/// A colour per level, in the order the report lists them.
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Draws `report`'s levels into `file` (SVG, 1650 × 500).
pub fn draw(report: &EvalReport, file: &Path) -> Result<(), PlotError> {
    let name = file.display().to_string();
    if !file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
    {
        return Err(PlotError::NotSvg(name));
    }
    let failed = |why: String| PlotError::Draw {
        file: name.clone(),
        why,
    };
    let root = SVGBackend::new(file, (1650, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(e.to_string()))?;
    let (left, rest) = root.split_horizontally(550);
    let (middle, right) = rest.split_horizontally(550);

    let points = |bins: &[Bin]| -> Vec<(f64, f64)> {
        bins.iter()
            .filter(|b| b.n > 0)
            .map(|b| (b.mean_p, b.observed))
            .collect()
    };
    let levels: Vec<Curve> = report
        .levels
        .iter()
        .enumerate()
        .map(|(i, (level, l))| Curve {
            label: format!("{level}: ECE {:.3}", l.term_fits.ece),
            colour: COLOURS[i % COLOURS.len()],
            points: points(&l.reliability),
        })
        .collect();
    reliability(
        &left,
        format!(
            "term.fits reliability ({} cards, {} candidates)",
            report.cards,
            report
                .levels
                .values()
                .next()
                .map(|l| l.term_fits.n)
                .unwrap_or(0)
        ),
        ("predicted p(fits)", "share that fit"),
        levels,
        &failed,
    )?;
    // The winners: what a curator is shown, against how often it is right.
    let mut winners = Vec::new();
    if let Some(l0) = report.levels.get("L0") {
        winners.push(Curve {
            label: format!("L0 p(fits): ECE {:.3}", l0.winner.ece),
            colour: COLOURS[0],
            points: points(&l0.winner_reliability),
        });
    }
    if let Some(w) = &report.winner_held_out {
        winners.push(Curve {
            label: format!("W2 winner head, held out: ECE {:.3}", w.metrics.ece),
            colour: COLOURS[3],
            points: points(&w.reliability),
        });
    }
    // The same head on the sealed part of a split set: fitted on every development card.
    if let Some(w) = report
        .sealed
        .as_ref()
        .and_then(|s| s.winner_held_out.as_ref())
    {
        winners.push(Curve {
            label: format!(
                "W2 on the sealed part ({} winners): ECE {:.3}",
                w.metrics.n, w.metrics.ece
            ),
            colour: COLOURS[4],
            points: points(&w.reliability),
        });
    }
    reliability(
        &middle,
        format!(
            "winners' reliability ({} winners)",
            report
                .levels
                .get("L0")
                .map(|l| l.winner.n)
                .unwrap_or_default()
        ),
        ("the winner's p", "share of winners right"),
        winners,
        &failed,
    )?;

    let mut coverage = ChartBuilder::on(&right)
        .caption("accuracy against coverage", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..1f64, 0.5f64..1f64)
        .map_err(|e| failed(e.to_string()))?;
    coverage
        .configure_mesh()
        .x_desc("share answered, most confident first")
        .y_desc("accuracy of those answered")
        .draw()
        .map_err(|e| failed(e.to_string()))?;
    for risk in [0.95, 0.90] {
        coverage
            .draw_series(LineSeries::new([(0.0, risk), (1.0, risk)], BLACK.mix(0.2)))
            .map_err(|e| failed(e.to_string()))?;
    }
    for (i, (level, l)) in report.levels.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        coverage
            .draw_series(LineSeries::new(
                l.coverage_curve.iter().map(|(c, a)| (*c, a.max(0.5))),
                colour.stroke_width(2),
            ))
            .map_err(|e| failed(e.to_string()))?
            .label(format!(
                "{level}: {:.0}% at 5% risk, {:.0}% at 10%",
                100.0 * l.term_fits.coverage_at_5,
                100.0 * l.term_fits.coverage_at_10
            ))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2)));
    }
    coverage
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(|e| failed(e.to_string()))?;
    root.present().map_err(|e| failed(e.to_string()))?;
    Ok(())
}

/// One line of a reliability diagram: its legend, colour and (mean p, share) points.
struct Curve {
    label: String,
    colour: RGBColor,
    points: Vec<(f64, f64)>,
}

/// A reliability diagram on `area`: the diagonal a perfectly calibrated p would follow,
/// and each curve as a line with its points.
fn reliability(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: String,
    (x_desc, y_desc): (&str, &str),
    curves: Vec<Curve>,
    failed: &dyn Fn(String) -> PlotError,
) -> Result<(), PlotError> {
    let e = |e: DrawingAreaErrorKind<_>| failed(e.to_string());
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..1f64, 0f64..1f64)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(e)?;
    chart
        .draw_series(LineSeries::new([(0.0, 0.0), (1.0, 1.0)], BLACK.mix(0.3)))
        .map_err(e)?
        .label("perfectly calibrated")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.mix(0.3)));
    for c in curves {
        let colour = c.colour;
        chart
            .draw_series(LineSeries::new(c.points.clone(), colour.stroke_width(2)))
            .map_err(e)?
            .label(c.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2)));
        chart
            .draw_series(
                c.points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, colour.filled())),
            )
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(e)?;
    Ok(())
}
