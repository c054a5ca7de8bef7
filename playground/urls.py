from django.urls import path

from playground import inbox, playground, runs, views

app_name = "playground"

urlpatterns = [
    path("", views.home, name="home"),
    path("playground/", playground.playground, name="playground"),
    path("playground/readout/", playground.readout, name="playground-readout"),
    path("playground/runs/<int:run_id>/", playground.inspector, name="inspector"),
    path("runs/", runs.run_list, name="runs"),
    path("runs/start/", runs.run_start, name="run-start"),
    path("runs/<int:run_id>/", runs.run_detail, name="run"),
    path("inbox/", inbox.inbox, name="inbox"),
    path("inbox/count/", views.inbox_count, name="inbox-count"),
    path("inbox/cards/", inbox.cards, name="inbox-cards"),
    path("inbox/<uuid:correlation_id>/", inbox.card, name="inbox-card"),
    path("inbox/<uuid:correlation_id>/resume/", inbox.resume, name="inbox-resume"),
]
