"""Issue #47: the API opens files from `serve.files` alone, whatever a URI's text says. A glob,
an image folder or a file is judged by the files it reaches once links are resolved: a link in
an allowed folder to a folder or file outside it is refused, and nothing is read from there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import test_serve
from test_serve import Served

media, serving = test_serve.media, test_serve.serving  # the fixtures, found by name


def write_png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full((48, 64, 3), 90, np.uint8))
    return path


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A folder outside `serve.files` holding images: imgs/0.png, imgs/1.png."""
    folder = tmp_path / "secret"
    for index in range(2):
        write_png(folder / "imgs" / f"{index}.png")
    return folder


def refused(served: Served, uri: str) -> None:
    """POST /sources of `uri` is a 400 naming serve.files, and no source was opened."""
    opened = len(served.pipeline.sources)
    reply = served.post("/sources", {"name": "g1", "uri": uri})
    assert reply.status == 400, f"{uri}: {reply}"
    assert "serve.files" in reply.json()["error"], reply
    assert len(served.pipeline.sources) == opened, f"{uri} opened a source"
    assert "g1" not in served.service.cameras


@pytest.mark.parametrize(
    "pattern",
    ["ln[k]/imgs/*.png", "l*/imgs/0*", "lnk/imgs/?.png", "*/imgs/*"],
)
def test_a_glob_through_a_link_out_of_the_folders_is_refused(
    serving: Any, media: Path, secret: Path, pattern: str
) -> None:
    """Before: 201, and the service read the secret folder's images (the pattern's text was
    resolved, and `ln[k]` is no path that exists, so it stayed inside)."""
    (media / "lnk").symlink_to(secret, target_is_directory=True)
    refused(serving(), f"{media}/{pattern}")


def test_an_image_folder_holding_a_link_out_is_refused(
    serving: Any, media: Path, secret: Path
) -> None:
    """Before: the folder itself resolved inside, so its linked image was read."""
    write_png(media / "imgs" / "0.png")
    (media / "imgs" / "1.png").symlink_to(secret / "imgs" / "0.png")
    served = serving()
    refused(served, str(media / "imgs"))
    refused(served, f"{media}/imgs/*.png")  # one match inside, one out
    refused(served, str(media / "imgs" / "1.png"))


def test_a_linked_folder_is_judged_where_it_leads(serving: Any, media: Path, secret: Path) -> None:
    (media / "lnk").symlink_to(secret, target_is_directory=True)
    refused(serving(), str(media / "lnk" / "imgs"))


def test_images_inside_the_folders_are_opened(serving: Any, media: Path, tmp_path: Path) -> None:
    """Links that stay inside are followed; a pattern that matches nothing is the source's own
    error, as before."""
    write_png(media / "imgs" / "0.png")
    (media / "imgs" / "1.png").symlink_to(media / "imgs" / "0.png")
    (media / "same").symlink_to(media / "imgs", target_is_directory=True)
    served = serving()
    for name, uri in [
        ("g1", str(media / "imgs")),
        ("g2", f"{media}/imgs/*.png"),
        ("g3", f"{media}/sam[e]/*.png"),
    ]:
        reply = served.post("/sources", {"name": name, "uri": uri})
        assert reply.status == 201, f"{uri}: {reply}"
    nothing = served.post("/sources", {"name": "g4", "uri": f"{media}/imgs/*.jpg"})
    assert nothing.status == 422, nothing
    assert "no images found" in nothing.json()["error"]
