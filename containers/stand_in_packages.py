"""Create an empty stand-in for every package pyproject.toml lists, at the folder its package-dir maps it to.

The images' deps stage installs the project's dependencies before the sources are copied (so a source change
keeps that layer cached); setuptools needs each listed package's folder to exist. Run from the folder holding
pyproject.toml; the stand-ins are removed again after the install.
"""

import pathlib
import tomllib

config = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["tool"]["setuptools"]
mapped = config.get("package-dir", {})
for package in config["packages"]:
    prefix = max((m for m in mapped if package == m or package.startswith(m + ".")), key=len, default=None)
    rest = package[len(prefix) + 1 :] if prefix and package != prefix else ("" if prefix else package)
    folder = pathlib.Path(mapped[prefix] if prefix else "", *rest.split(".")) if rest else pathlib.Path(mapped[prefix])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").touch()
