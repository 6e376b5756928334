import time
def test_timing(request):
    for name in ["spm_proto", "trained_model", "model_dir", "exported", "translator"]:
        t = time.time(); request.getfixturevalue(name); print(name, round(time.time() - t, 2))
