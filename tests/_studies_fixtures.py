"""Running a study notebook with papermill on the committed records (measure=False): shared by the study tests."""
import sys, pathlib, subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent

def notebook_from_results(study:str, tmp_path:pathlib.Path, profile:str='quick') -> str:
    "Execute nbs/studies/<study>.ipynb with measure=False (figures into tmp_path/'figs'); the executed notebook's text."
    out = tmp_path/'out.ipynb'
    r = subprocess.run([sys.executable, '-m', 'papermill', str(ROOT/'nbs'/'studies'/f'{study}.ipynb'), str(out),
                        '-p', 'profile', profile, '-p', 'measure', 'False', '-p', 'figures_dir', str(tmp_path/'figs'),
                        '-p', 'progress', 'False', '--cwd', str(ROOT), '-k', 'python3'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return out.read_text()
