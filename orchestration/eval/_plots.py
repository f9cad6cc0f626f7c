"""The report's two plots: the pass rate of each configuration with its 95% interval, and
the faults each layer recovered under each configuration.

SVG is written here with nothing but the standard library (the default: a Markdown
viewer shows it, and the report needs no extra); PNG is drawn with matplotlib, from the
``eval`` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal
from xml.sax.saxutils import escape

from orchestration._extras import needs_extra
from orchestration.errors import ConfigError
from orchestration.eval._attribution import LAYER_LABELS

if TYPE_CHECKING:
    from orchestration.eval._report import ConfigSummary

__all__ = ["PLOTS", "PlotFormat", "write_plots"]

PlotFormat = Literal["svg", "png"]
PLOTS = ("pass_rate", "layers")
_COLOURS = ("#1c7ed6", "#f08c00", "#2b8a3e", "#ae3ec9", "#e03131", "#0c8599", "#5c940d")
_FONT = 'font-family="sans-serif" font-size="12"'
_SMALL_FONT = 'font-family="sans-serif" font-size="10"'


def write_plots(configs: list[ConfigSummary], directory: Path, fmt: PlotFormat) -> dict[str, Path]:
    """Draw both plots into ``directory``; their files by name (see :data:`PLOTS`)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {name: directory / f"{name}.{fmt}" for name in PLOTS}
    if fmt == "png":
        _png(configs, files)
    else:
        files["pass_rate"].write_text(pass_rate_svg(configs), encoding="utf-8")
        files["layers"].write_text(layers_svg(configs), encoding="utf-8")
    return files


def _layer_rows(configs: list[ConfigSummary]) -> list[str]:
    seen: list[str] = []
    for summary in configs:
        for row in summary.layers:
            if row.layer not in seen:
                seen.append(row.layer)
    return seen


def _recovered(summary: ConfigSummary, layer: str) -> int:
    return next((row.recovered for row in summary.layers if row.layer == layer), 0)


# --- SVG ------------------------------------------------------------------------------------
def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="12" y="20" {_FONT} font-weight="bold">{escape(title)}</text>',
        *body, "</svg>", ""])


def pass_rate_svg(configs: list[ConfigSummary]) -> str:
    """Horizontal bars: each configuration's pass rate, its 95% interval as a whisker."""
    left, plot_width, row = 170, 400, 34
    height = 60 + row * len(configs) + 24
    body = []
    for tick in range(0, 101, 25):
        x = left + plot_width * tick / 100
        body.append(f'<line x1="{x:.1f}" y1="34" x2="{x:.1f}" y2="{height - 26}" '
                    'stroke="#dee2e6"/>')
        body.append(f'<text x="{x:.1f}" y="{height - 10}" {_FONT} text-anchor="middle" '
                    f'fill="#495057">{tick}%</text>')
    for index, summary in enumerate(configs):
        y = 44 + index * row
        width = plot_width * summary.pass_rate
        low, high = (left + plot_width * v for v in summary.interval)
        colour = _COLOURS[index % len(_COLOURS)]
        middle = y + 11
        body += [
            f'<text x="{left - 8}" y="{middle + 4}" {_FONT} text-anchor="end">'
            f"{escape(summary.name)}</text>",
            f'<rect x="{left}" y="{y}" width="{width:.1f}" height="22" fill="{colour}"/>',
            f'<line x1="{low:.1f}" y1="{middle}" x2="{high:.1f}" y2="{middle}" stroke="#212529" '
            'stroke-width="1.5"/>',
            f'<line x1="{low:.1f}" y1="{y + 4}" x2="{low:.1f}" y2="{y + 18}" stroke="#212529"/>',
            f'<line x1="{high:.1f}" y1="{y + 4}" x2="{high:.1f}" y2="{y + 18}" stroke="#212529"/>',
            f'<text x="{left + plot_width + 8}" y="{middle + 4}" {_FONT}>'
            f"{summary.pass_rate * 100:.1f}% ({summary.passed}/{summary.runs})</text>",
        ]
    return _svg(left + plot_width + 110, height, "Pass rate by configuration (95% interval)", body)


def layers_svg(configs: list[ConfigSummary]) -> str:
    """Grouped horizontal bars: faults each layer recovered, one bar per configuration."""
    layers = _layer_rows(configs)
    left, plot_width, bar, gap = 200, 360, 14, 10
    most = max([1, *(_recovered(c, layer) for c in configs for layer in layers)])
    group = bar * len(configs) + gap
    legend_y = 34
    top = legend_y + 22
    height = top + group * max(1, len(layers)) + 10
    body = []
    for index, summary in enumerate(configs):
        x = left + index * 130
        colour = _COLOURS[index % len(_COLOURS)]
        body.append(f'<rect x="{x}" y="{legend_y}" width="12" height="12" fill="{colour}"/>')
        body.append(f'<text x="{x + 16}" y="{legend_y + 11}" {_FONT}>{escape(summary.name)}</text>')
    for row_index, layer in enumerate(layers):
        y0 = top + row_index * group
        body.append(f'<text x="{left - 8}" y="{y0 + group / 2 + 2:.1f}" {_FONT} '
                    f'text-anchor="end">{escape(LAYER_LABELS.get(layer, layer))}</text>')
        for index, summary in enumerate(configs):
            value = _recovered(summary, layer)
            y = y0 + index * bar
            width = plot_width * value / most
            body.append(f'<rect x="{left}" y="{y}" width="{width:.1f}" height="{bar - 2}" '
                        f'fill="{_COLOURS[index % len(_COLOURS)]}"/>')
            body.append(f'<text x="{left + width + 4:.1f}" y="{y + bar - 4}" {_SMALL_FONT}>'
                        f"{value}</text>")
    return _svg(left + plot_width + 60, height, "Faults recovered, by layer", body)


# --- PNG ------------------------------------------------------------------------------------
def _png(configs: list[ConfigSummary], files: dict[str, Path]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ConfigError(needs_extra("PNG plots (--plots png)", "eval", exc.name)) from None
    names = [c.name for c in configs]
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(configs) + 1.2))
    rates = [c.pass_rate * 100 for c in configs]
    errors = [[r - c.interval[0] * 100 for r, c in zip(rates, configs, strict=True)],
              [c.interval[1] * 100 - r for r, c in zip(rates, configs, strict=True)]]
    ax.barh(names, rates, xerr=errors, capsize=4, color=_COLOURS[: len(configs)])
    ax.set_xlim(0, 100)
    ax.set_xlabel("pass rate (%), 95% interval")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(files["pass_rate"], dpi=110)
    plt.close(fig)
    layers = _layer_rows(configs)
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(layers) * max(1, len(configs)) + 1.2))
    height = 0.8 / max(1, len(configs))
    for index, summary in enumerate(configs):
        ax.barh([i + index * height for i in range(len(layers))],
                [_recovered(summary, layer) for layer in layers], height=height,
                label=summary.name, color=_COLOURS[index % len(_COLOURS)])
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(layers))],
                  [LAYER_LABELS.get(layer, layer) for layer in layers])
    ax.invert_yaxis()
    ax.set_xlabel("faults recovered")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(files["layers"], dpi=110)
    plt.close(fig)
