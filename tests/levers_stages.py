"""The two stages of ``art-adp levers`` for the tests that run a lever table into a fresh folder: the classifiers'
training (:func:`~art_adp.apps.levers_classifiers.train_levers_classifiers`), then the measurement
(:func:`~art_adp.apps.levers.run_levers`, which never trains)."""

from art_adp.apps import levers
from art_adp.apps.levers_classifiers import train_levers_classifiers


def train_and_measure(data, run_dir, **keywords) -> dict:
    """Train the classifiers a :func:`~art_adp.apps.levers.run_levers` call with ``keywords`` measures (those of its
    keywords the training takes), then measure: what ``art-adp levers`` does with the data in hand."""
    train_levers_classifiers(data, run_dir, **levers.stage_keywords(train_levers_classifiers, keywords))
    return levers.run_levers(data, run_dir, **keywords)
