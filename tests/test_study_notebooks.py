"""Each study notebook, run as stored (measure=False on the committed records), gives back its stored outputs."""
import pytest
from researchkit.studies.catalog import study_names, notebook_path
from _notebook_regression import fixture

@pytest.mark.parametrize('study', study_names())
def test_notebook_outputs_match_the_stored_ones(study):
    fixture(notebook_path(study)).check(str(notebook_path(study)))
