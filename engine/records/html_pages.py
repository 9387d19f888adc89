"""The HTML documents the app exports (a run's report and transcript, a conversation), rendered by
Jinja2 with autoescaping on: every value is data from a run, a trace file or a conversation file,
any of which may be crafted, so nothing reaches the page as markup unless a template says so.

The templates live here, beside the one environment that renders them; callers pass plain values.
"""

from __future__ import annotations

import jinja2
from markupsafe import Markup

_STYLE_BASE = """body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; line-height: 1.5; }
.legend span { margin-right: 1.5em; }
.note, .meta { color: #777; }"""

RUN_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
{{ base_style }}
body { max-width: 60em; }
.prompt { white-space: pre-wrap; font-family: ui-monospace, monospace; color: #666; background: #f4f5f7;
          padding: .6em .9em; border-radius: 8px; }
.output { white-space: pre-wrap; font-family: ui-monospace, monospace; padding: .6em .9em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { text-align: left; padding: .15em .8em .15em 0; vertical-align: top; }
td.text { white-space: pre-wrap; font-family: ui-monospace, monospace; }
figure { display: inline-block; margin: .5em 1em .5em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
.meta { font-size: .9em; }
</style></head><body>
<h1>{{ title }}</h1>
{%- if report %}
<p class="meta">Recorded {{ created }} with SpecDec Studio {{ app }} · finished: {{ finish }}</p>
<h2>Prompt</h2>
{%- endif %}
{%- if not report %}
<p class="legend">{% for label, style in legend %}<span class="swatch" style="{{ style }}">{{ label }}</span>{% endfor %}</p>
{%- endif %}
<div class="prompt">{{ prompt }}</div>
{%- if report %}
<h2>Output</h2>
<p class="legend">{% for label, style in legend %}<span class="swatch" style="{{ style }}">{{ label }}</span>{% endfor %}</p>
{%- endif %}
<div class="output" id="output">
{%- for t in tokens %}<span class="tok {{ t.source }}" data-source="{{ t.source }}" data-id="{{ t.id }}" style="{{ t.style }}" title="{{ t.title }}">{{ t.text }}</span>{% endfor -%}
</div>
{%- if report %}
<h2>Figures</h2>
<table id="figures">{% for label, value in figures %}<tr><th>{{ label }}</th><td>{{ value }}</td></tr>{% endfor %}</table>
<h2>Settings</h2>
<table id="settings">{% for k, v in settings %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}</table>
<h2>Model</h2>
<table id="model">{% for k, v in model %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}</table>
<h2>Plots</h2>
<div id="plots">
{%- for caption, data in plots %}<figure><img alt="{{ caption }}" src="data:image/png;base64,{{ data }}"><figcaption>{{ caption }}</figcaption></figure>
{%- else %}<p>No plots were exported with this report.</p>{% endfor -%}
</div>
<h2>Steps</h2>
<table id="steps"><tr><th>step</th><th>tokens</th><th>drafted</th><th>accepted</th><th>decode (ms)</th><th>text</th></tr>
{% for s in steps %}<tr><td>{{ s.step }}</td><td>{{ s.n_tokens }}</td><td>{{ s.n_drafted }}</td><td>{{ s.n_accepted }}</td><td>{{ s.decode_ms }}</td><td class="text">{{ s.text }}</td></tr>
{% endfor %}</table>
{%- endif %}
</body></html>
"""

CONVERSATION_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
{{ base_style }}
body { max-width: 52em; }
.msg { margin: 1em 0; padding: .6em .9em; border-radius: 8px; background: #f4f5f7; }
.msg.user { background: #e8f0fe; }
.msg.dropped { opacity: .5; }
.role { font-weight: 600; font-size: .85em; color: #555; }
.text { white-space: pre-wrap; font-family: ui-monospace, monospace; }
.note { font-size: .8em; font-style: italic; }
.md pre { background: rgba(127,127,127,.15); padding: .5em .7em; border-radius: 6px; overflow-x: auto; }
.md code { font-family: ui-monospace, monospace; background: rgba(127,127,127,.15); padding: 0 .2em; }
.md pre code { background: none; padding: 0; }
.md table { border-collapse: collapse; } .md td, .md th { border: 1px solid #ccc; padding: .2em .5em; }
</style></head><body>
<h1>{{ title }}</h1>
<p class="legend">{% for label, style in legend %}<span style="{{ style }}">{{ label }}</span>{% endfor %}</p>
{% for m in messages -%}
<div class="msg {{ m.role }}{{ ' dropped' if m.dropped }}"><div class="role">{{ m.role_name }}</div>
{%- if m.rendered %}<div class="md">{{ m.rendered }}</div>{% else %}<div class="text">
{%- if m.pieces is none %}{{ m.content }}
{%- else %}{% for p in m.pieces %}<span{% if p.style %} style="{{ p.style }}"{% endif %} title="{{ p.title }}">{{ p.text }}</span>{% endfor %}
{%- endif %}</div>{% endif %}
{%- if m.dropped %}<div class="note">no longer in the model's context</div>{% endif %}
{%- if m.notes %}<div class="note">{{ m.notes }}</div>{% endif %}</div>
{% endfor -%}
<p class="note">Exported from SpecDec Studio on {{ exported }}.</p>
</body></html>
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
_TEMPLATES = {"run": _ENV.from_string(RUN_PAGE), "conversation": _ENV.from_string(CONVERSATION_PAGE)}


def render(page: str, **values) -> str:
    """``page`` ("run" or "conversation") with ``values``, every one of them escaped."""
    return _TEMPLATES[page].render(base_style=Markup(_STYLE_BASE), **values)
