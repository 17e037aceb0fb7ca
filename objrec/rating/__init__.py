"""Rating reference images: how well an image will be recognised, and why not.

:func:`rate` scores an image 0-100 as enrolment would store it and names the reasons that lowered the score
(few or repetitive features, features crowded in a small area, low or colour-only contrast, too few pixels,
JPEG blocking, symmetry), each with its number. The measures are in :mod:`objrec.rating.measures`, the score
model in :mod:`objrec.rating.model`, the picture of a rating in :mod:`objrec.rating.picture`.
"""

from objrec.rating.model import WEIGHTS, Reason, score_from_measures
from objrec.rating.rater import RATING_VERSION, Rating, rate, read_reference

__all__ = ["rate", "Rating", "Reason", "RATING_VERSION", "WEIGHTS", "score_from_measures", "read_reference"]
