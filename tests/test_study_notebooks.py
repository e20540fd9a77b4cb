"""Each study notebook, run as stored (measure=False on the committed records), gives back its stored outputs."""
import json
import pytest
from researchkit.studies.catalog import study_names, notebook_path
from _notebook_regression import fixture

@pytest.mark.parametrize('study', study_names())
def test_notebook_outputs_match_the_stored_ones(study):
    fixture(notebook_path(study)).check(str(notebook_path(study)))

@pytest.mark.parametrize('study', study_names())
def test_stored_notebook_shows_its_figures_and_their_campaign(study):
    "Opened anywhere (JupyterLab, GitHub, nbconvert), a stored study notebook shows its figures: SVG outputs, each under a line naming the figure and the campaign it shows."
    cells = json.loads(notebook_path(study).read_text())['cells']
    outs = [o for c in cells for o in c.get('outputs', [])]
    svgs = [i for i, o in enumerate(outs) if 'image/svg+xml' in o.get('data', {})]
    assert svgs and not any('image/png' in o.get('data', {}) for o in outs), (study, len(svgs))
    for i in svgs:
        before = ''.join(outs[i - 1].get('data', {}).get('text/markdown', '')) if i else ''
        assert ' — campaign rk' in before, (study, outs[i - 1] if i else None)
