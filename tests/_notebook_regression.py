"""The study notebooks as regression tests: each one, run as stored (measure=False, reading the committed quick
campaign), must give back its stored outputs — the claims table, the notes, the record counts. A change that alters
a verdict or a number shows as a diff. Outputs that describe the machine the notebook runs on (cells tagged `host`),
the figures themselves (figures/ holds them; the studies' figure tests check them) and run ids are not compared."""
import json, pathlib
from pytest_notebook.nb_regression import NBRegressionFixture

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUN_ID = (r'rk[0-9a-f]{4}(-\d+)?', 'rkXXXX')

def fixture(notebook:pathlib.Path, *, regen:bool=False) -> NBRegressionFixture:
    cells = json.loads(pathlib.Path(notebook).read_text())['cells']
    host = tuple(f'/cells/{i}/outputs' for i, c in enumerate(cells) if 'host' in c.get('metadata', {}).get('tags', []))
    texts = ('/cells/*/outputs/*/text', '/cells/*/outputs/*/data/text/plain', '/cells/*/outputs/*/data/text/html',
             '/cells/*/outputs/*/data/text/markdown')
    return NBRegressionFixture(
        exec_cwd=str(ROOT), exec_timeout=900, force_regen=regen, diff_color_words=False, diff_use_color=False,
        diff_ignore=('/cells/*/outputs/*/traceback', '/cells/*/outputs/*/data/image/png', '/cells/*/outputs/*/data/image/svg+xml',
                     '/cells/*/execution_count',
                     '/cells/*/outputs/*/execution_count', '/metadata/language_info', *host),
        diff_replace=tuple((p, *RUN_ID) for p in texts))

def strip_images(notebook:pathlib.Path):
    "Drop figure bitmaps from the stored outputs (figures/ holds them; the SVG each figure also has stays, so the notebook shows it)."
    nb = json.loads(pathlib.Path(notebook).read_text())
    for c in nb['cells']:
        for o in c.get('outputs', []):
            o.get('data', {}).pop('image/png', None)
    pathlib.Path(notebook).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
