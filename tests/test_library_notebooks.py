"""The library notebooks' examples and tests under their code, and the documentation site made of them (`make docs`,
tools/build-docs), inside the suite: one process executes every library notebook the way `nbdev-test` does (what `make
nbdev-test` runs on its own) while the other workers run their files, under the leak guard like every test, and writes their
pages with the outputs; headless Chromium (Debian's) then opens the site. (Run before the suite, nbdev-test held both cores
for ~49 s while nothing else could run.)"""
import os, re, sys, json, shutil, pathlib, subprocess, importlib.machinery, importlib.util
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT/'runs'/'test-artifacts'   # kept after the run (runs/ is not tracked)

def _builder():
    loader = importlib.machinery.SourceFileLoader('build_docs', str(ROOT/'tools'/'build-docs'))
    spec = importlib.util.spec_from_loader('build_docs', loader)
    mod = importlib.util.module_from_spec(spec); loader.exec_module(mod)
    return mod

@pytest.fixture(scope='module')
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp('docs')/'site'
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'build-docs'), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=1500)
    return out, r

def test_every_library_notebook_runs_its_examples_and_tests_and_gets_its_page(site):
    "Each library notebook ran clean (a failure names the notebook and its cell) and has its page, with the outputs of its examples."
    out, r = site
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-8000:]
    nbs = _builder().library_notebooks()
    assert len(nbs) > 40 and {p.stem for p in (out/'api').glob('*.html')} == {p.stem for p in nbs}
    assert not [p for p in nbs if p.parent.name == 'studies']
    # an example's output, computed here: 00_core's first run id is printed under its cell
    core = (out/'api'/'00_core.html').read_text()
    assert 'jp-OutputArea-output' in core and '#| export' not in core, core[:2000]

def _chromium() -> str:
    """Debian's chromium, installed from apt when missing, as the image test installs its engine: through `install_debs`, one
    install at a time on the machine (CI on an empty tool cache, 2026-11-28: a bare apt-get here found dpkg locked by the cluster's
    packages installing on another worker, and failed)."""
    from researchkit.runtimes.docker_engine import install_debs
    exe = shutil.which('chromium')
    if exe: return exe
    install_debs(['chromium'], 'a headless browser for the docs test', timeout=1200)
    exe = shutil.which('chromium')
    assert exe, 'apt installed chromium but it is not on PATH'
    return exe

def _open(exe:str, page:pathlib.Path, shot:pathlib.Path) -> str:
    "The page's DOM after Chromium loaded it, headless and offline; a screenshot of it to `shot`."
    base = [exe, '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-extensions', '--hide-scrollbars',
            '--user-data-dir=' + str(shot.parent/'.chromium'), '--window-size=1280,2400']
    r = subprocess.run([*base, '--dump-dom', page.as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout, r.stderr[-2000:]
    s = subprocess.run([*base, f'--screenshot={shot}', page.as_uri()], capture_output=True, text=True, timeout=120)
    assert s.returncode == 0 and shot.stat().st_size > 10_000, s.stderr[-2000:]
    return r.stdout

def test_the_site_opens_in_a_browser_with_a_studys_figures_and_claims_table(site):
    "The index leads to every study, the report and the library; a study page shows its figures (SVG) and its claims table with verdicts."
    out, r = site
    assert (out/'index.html').exists(), r.stderr[-4000:]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    exe = _chromium()
    index = _open(exe, out/'index.html', ARTIFACTS/'docs-index.png')
    from researchkit.studies.catalog import study_names
    for s in study_names(): assert f"studies/{s}.html" in index, s
    assert "report.html" in index and "api/00_core.html" in index and 'Quarto' in index   # the stand-in says what it stands in for
    study = _open(exe, out/'studies'/'cni-net.html', ARTIFACTS/'docs-cni-net.png')
    assert study.count('src="data:image/svg+xml') >= 3, study.count('src="data:image/svg+xml')   # nbconvert inlines each SVG output
    tables = re.findall(r'<table.*?</table>', study, re.S)
    assert any(re.search(r'reproduced|refuted|inconclusive', t) for t in tables), len(tables)
    assert ' — campaign rk' in study
    report = _open(exe, out/'report.html', ARTIFACTS/'docs-report.png')
    srcs = re.findall(r'<img [^>]*src="([^"]+)"', report)
    assert srcs and all((out/s).exists() for s in srcs), [s for s in srcs if not (out/s).exists()][:5]
